"""NVIDIA's ResNet-50 scaling tables and the ZeRO paper's tables: every point cited, the
model evaluated on them, the fit seeing only its half, the report and goals wired."""

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dpsim.sim.fidelity import input_pipeline, resnet_scaling, zero_paper
from dpsim.sim.fidelity.goals import goals
from dpsim.sim.workload import get_workload

COMMIT = re.compile(r"^[0-9a-f]{40}$")
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "validation.json"


@pytest.fixture(scope="module")
def scaling() -> dict[str, Any]:
    return resnet_scaling.evaluate()  # 18 bisections, about a second


@pytest.fixture(scope="module")
def zero() -> dict[str, Any]:
    return zero_paper.evaluate()


def test_every_resnet_table_names_repo_path_commit_and_column() -> None:
    data = resnet_scaling.load()
    assert len(data["tables"]) >= 6
    for t in data["tables"]:
        for src in (t["source"], t["batch_source"]):
            assert src["repo"] == "NVIDIA/DeepLearningExamples"
            assert src["path"].endswith((".md", ".yml"))
            assert COMMIT.match(src["commit"])
            assert src["where"]
        assert t["all_reduce"]
        assert t["precision"] in ("fp32", "tf32", "amp")
        ns = [r["n_gpus"] for r in t["rows"]]
        assert ns[0] == 1
        assert len(ns) >= 2
        assert ns == sorted(ns)
        base = t["rows"][0]["img_per_s"]
        for r in t["rows"]:  # the printed scaling column agrees with the throughputs
            assert r["img_per_s"] / base == pytest.approx(r["published_scaling"], abs=0.04)


def test_the_zero_paper_tables_are_complete_and_cited() -> None:
    data = zero_paper.load()
    src = data["source"]
    assert "1910.02054" in src["citation"]
    assert src["url"].startswith("https://arxiv.org/")
    assert src["read_from"]
    t1 = data["table1"]
    assert t1["dp"] == [1, 4, 16, 64, 256, 1024]
    assert "Table 1" in t1["where"]
    for model in t1["params"]:
        assert set(t1["gb"][model]) == set(zero_paper.STAGES)
        assert all(len(cells) == 6 for cells in t1["gb"][model].values())
    assert len(data["table2"]["rows"]) == 5
    assert "Table 2" in data["table2"]["where"]


def test_one_gpu_rows_are_inputs_reproduced_exactly() -> None:
    table = resnet_scaling.load()["tables"][1]  # PyTorch, DGX A100, AMP
    w = get_workload("resnet50")
    base_s = table["batch_per_gpu"] / table["rows"][0]["img_per_s"]
    device = resnet_scaling.device_of(table)
    dtype = resnet_scaling.compute_dtype(table)
    eff = resnet_scaling.fit_efficiency(w, device, table["batch_per_gpu"], dtype, base_s)
    one = resnet_scaling.ddp_step_s(w, table, replace(device, efficiency=eff), 1)
    assert one == pytest.approx(base_s, rel=0.02)  # DDP on 1 GPU: the same step + hooks


def test_every_multi_gpu_row_is_predicted_and_its_errors_add_up(
        scaling: dict[str, Any]) -> None:
    tables = resnet_scaling.load()["tables"]
    assert scaling["n_points"] == sum(len(t["rows"]) - 1 for t in tables)
    for r in scaling["rows"]:
        assert r["n_gpus"] > 1
        assert r["error"] == pytest.approx(r["predicted_s"] / r["published_s"] - 1, abs=2e-4)
        assert 0.99 < r["predicted_efficiency"] <= 1.0  # the all-reduce hides behind backward
        assert r["predicted_s"] >= r["base_s"]
    alone = scaling["ddp_alone"]
    worst = max(max(abs(r["error"]), abs(r["efficiency_error"])) for r in scaling["rows"])
    assert alone["worst"] == pytest.approx(worst, abs=1e-4)
    assert alone["worst_case"]["table"] == "tensorflow-dgx2-amp"  # stated in the docs
    by = alone["worst_by_precision"]
    assert max(by["fp32"], by["tf32"]) < 0.15 < by["amp"]  # alone, only AMP rows miss


def test_the_gradient_dtype_reaches_the_model() -> None:
    # The step time is not monotone in the gradient bytes: fp16 buckets hold twice the
    # parameters, so the exposed last bucket can be larger; the dtype must still change it.
    table = next(t for t in resnet_scaling.load()["tables"] if t["id"] == "mxnet-dgx2-amp")
    w = get_workload("resnet50")
    device = resnet_scaling.device_of(table)
    half = resnet_scaling.ddp_step_s(w, table, device, 16)
    full = resnet_scaling.ddp_step_s(w, {**table, "gradient_dtype": "fp32"}, device, 16)
    assert full != pytest.approx(half, rel=1e-6)


def test_every_framework_names_where_it_decodes_jpegs() -> None:
    data = resnet_scaling.load()
    pipes = data["input_pipelines"]
    assert {t["framework"] for t in data["tables"]} <= set(pipes)
    assert {fw: p["decode"] for fw, p in pipes.items()} == {
        "pytorch": "host", "tensorflow": "host", "mxnet": "gpu"}
    for p in pipes.values():
        assert p["what"]
        for src in p["sources"]:
            assert src["repo"] == "NVIDIA/DeepLearningExamples"
            assert COMMIT.match(src["commit"])
            assert src["path"]
            assert src["where"]


def test_the_wait_is_fitted_on_even_rows_only(scaling: dict[str, Any]) -> None:
    rows = scaling["rows"]
    shipped = scaling["with_wait"]
    assert [r["held_out"] for r in shipped["rows"]] == [i % 2 == 1 for i in range(len(rows))]
    train = list(range(0, len(rows), 2))
    s = input_pipeline.fit(rows, train)
    assert s["host"] > s["gpu"] > 0  # host decoding waits longer per image
    moved = [dict(r, published_s=r["published_s"] * (1.5 if i % 2 else 1.0))
             for i, r in enumerate(rows)]
    assert input_pipeline.fit(moved, train) == s  # held-out rows never reach the fit
    one = dict(rows[0], n_gpus=1)
    assert input_pipeline.wait_term(one) == 0.0  # one rank waits for nobody
    assert input_pipeline.expected_max_normal(2) == pytest.approx(1 / 3.14159265 ** 0.5,
                                                                  rel=1e-4)
    # the wait is the same seconds for one batch whatever the precision: AMP feels it more
    amp, tf32 = shipped["rows"][1], shipped["rows"][0]
    assert (amp["table"], tf32["table"]) == ("pytorch-dgxa100-amp", "pytorch-dgxa100-tf32")
    assert amp["wait_s"] == tf32["wait_s"]


def test_the_wait_meets_the_goal_on_held_out_rows(scaling: dict[str, Any]) -> None:
    shipped = scaling["with_wait"]
    assert shipped["held_out_worst"] <= 0.15
    assert shipped["fit_residual_worst"] <= 0.15
    assert scaling["leave_one_table_out"]["worst"] <= 0.15
    assert scaling["mirror"]["held_out_worst"] <= 0.15
    forms = {v["form"]: v for v in scaling["variants"]}
    assert len(forms) == len(input_pipeline.VARIANTS)
    earlier = forms["c x 1-GPU step, one c (the earlier extension)"]
    assert earlier["held_out_worst"] > 0.15  # the earlier extension misses; said in the docs


def test_printed_numbers_keep_their_precision() -> None:
    assert zero_paper.printed("1.88") == pytest.approx((1.88, 0.005))
    assert zero_paper.printed("0.5T") == pytest.approx((5e11, 5e10))
    assert zero_paper.printed("7.6B") == pytest.approx((7.6e9, 5e7))
    assert zero_paper.errors(0.1171875, "0.12") == pytest.approx((-0.0234375, 0.0))
    assert zero_paper.errors(1.1, "1")[1] == 0.0
    assert zero_paper.errors(1.6, "1")[1] > 0


def test_zero_tables_against_dpsim_memory(zero: dict[str, Any]) -> None:
    rows = zero["rows"]
    assert zero["n_points"] == 54 + 20
    cell = next(r for r in rows if r.get("model") == "7.5B" and r["stage"] == "os"
                and r["dp"] == 64)
    assert cell["predicted"] == pytest.approx(31.40625, abs=1e-4)  # paper: 31.4
    base = [r for r in rows if r["table"] == "Table 2" and r["stage"] == "baseline"]
    assert [r["predicted_params"] for r in base] == [m * 2 * 10**9 for m in (1, 2, 4, 8, 16)]
    assert zero["bold_cells_agree"]
    assert zero["worst"] <= 0.01 < zero["raw_worst"]  # rounding, not the model


def test_results_carry_both_families_and_goals() -> None:
    results = json.loads(RESULTS.read_text())
    fam = results["families"]
    for key in ("nvidia_resnet50_scaling", "zero_paper_tables"):
        assert {"goal", "value", "goal_met", "worst_case", "rows"} <= set(fam[key])
    texts = [g["goal"] for g in goals(results)]
    assert any(t.startswith("NVIDIA ResNet-50 tables") for t in texts)
    assert any(t.startswith("ZeRO paper Tables 1-2") for t in texts)
    resnet = fam["nvidia_resnet50_scaling"]
    assert resnet["goal_met"] == (resnet["value"]["worst"] <= 0.15
                                  and resnet["fit_residual_worst"] <= 0.15)
    assert resnet["ddp_alone"]["worst"] > 0.15  # the DDP strategy alone misses
    assert not any("ZeRO paper tables" in n for n in results["not_covered"])
