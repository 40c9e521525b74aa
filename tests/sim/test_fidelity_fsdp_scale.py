"""The FSDP/ZeRO-3 throughput family over its shipped dataset: every point sourced, the
fit sees only its fit points, the held-out errors are what the model predicts, and the
family reaches validation.json's goals."""

import copy
import re
from typing import Any

import pytest

from dpsim.reports import fsdp_scale_section
from dpsim.sim.fidelity import fsdp_scale, fsdp_width
from dpsim.sim.fidelity.goals import goals
from dpsim.sim.hardware import DEVICES


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return fsdp_scale.load()


@pytest.fixture(scope="module")
def evaluated() -> dict[str, Any]:
    return fsdp_scale.evaluate()  # one evaluation for the module (about a second)


def test_every_series_point_model_and_cluster_is_sourced(data: dict[str, Any]) -> None:
    assert len(data["series"]) >= 3
    for series in data["series"]:
        src = series["source"]
        if src["kind"] == "repository":
            assert src["repo"]
            assert src["path"]
            assert re.fullmatch(r"[0-9a-f]{40}", src["commit"])
        else:
            assert src["url"].startswith("https://")
            assert src["title"]
        assert src["where"]
        assert series["config"]
        assert series["model"] if "model" in series else all(
            "model" in p for p in series["points"])
        assert series["cluster"] in data["clusters"]
        ids = [p["id"] for p in series["points"]]
        assert series["fit_on"] in ids
        assert len(ids) == len(set(ids)) >= 2
        for p in series["points"]:
            assert p["where"]
            assert p["published"] > 0
            assert p["batch"] >= 1
            assert p["strategy"] in ("fsdp", "hsdp")
    assert all(m["source"] for m in data["models"].values())
    assert all(c["source"] for c in data["clusters"].values())


def test_held_out_rows_are_the_model_s_errors(evaluated: dict[str, Any],
                                              data: dict[str, Any]) -> None:
    rows = evaluated["rows"]
    assert evaluated["n_points"] == len(rows) == sum(len(s["points"]) for s in data["series"])
    # one efficiency fit point per series, one width-law training point
    assert evaluated["n_held_out"] == len(rows) - len(data["series"]) - 1
    assert [r["role"] for r in rows].count("width-law fit") == 1
    for r in rows:
        assert r["error"] == pytest.approx(r["predicted"] / r["published"] - 1, abs=2e-4)
        assert 0 <= r["exposed_comm_share"] < 1
    fit_rows = [r for r in rows if not r["held_out"]]
    assert evaluated["fit_residual_worst"] == max(abs(r["error"]) for r in fit_rows) < 1e-3
    held = sorted(abs(r["error"]) for r in rows if r["held_out"])
    assert evaluated["worst"] == max(held)
    assert min(held) <= evaluated["median"] <= max(held)
    assert all(0 < e <= 1 for e in evaluated["fitted_efficiency"].values())
    assert set(evaluated["median_by_kind"]) == {"scale", "model size"}


def test_the_fit_sees_only_its_fit_point(data: dict[str, Any]) -> None:
    series = next(s for s in data["series"] if s["id"].startswith("torchtitan"))
    fit = fsdp_scale.implied_efficiency(data, series, fsdp_scale.fit_point(series))
    moved = copy.deepcopy(series)
    for p in moved["points"]:
        if p["id"] != moved["fit_on"]:
            p["published"] *= 3  # held-out numbers change nothing the fit returns
    assert fsdp_scale.implied_efficiency(data, moved, fsdp_scale.fit_point(moved)) == fit
    fsdp_scale.fit_point(moved)["published"] *= 0.5
    lower = fsdp_scale.implied_efficiency(data, moved, fsdp_scale.fit_point(moved))
    assert lower == pytest.approx(fit * 0.5, rel=0.05)  # nearly compute-bound


def test_activation_checkpointing_reaches_the_strategy(data: dict[str, Any]) -> None:
    series = next(s for s in data["series"] if s["id"].startswith("fms-fsdp"))
    point = next(p for p in series["points"] if p["activation_checkpointing"])
    with_ac = fsdp_scale.step(data, series, point, 0.5)
    without = fsdp_scale.step(data, series, {**point, "activation_checkpointing": False}, 0.5)
    assert 1.2 < with_ac.compute_s / without.compute_s < 1.4  # one forward recomputed


def test_clusters_and_metrics(data: dict[str, Any]) -> None:
    teton = fsdp_scale.cluster(data["clusters"]["grand-teton"], 128, 0.3)
    assert (teton.n_nodes, teton.nics, teton.device.memory_GiB) == (16, 8, 96.0)
    assert teton.device.efficiency == 0.3
    assert teton.inter_node is not None
    assert teton.inter_node.bandwidth_GBps == 50.0
    p4d = fsdp_scale.cluster(data["clusters"]["p4d"], 512, 0.3)
    assert (p4d.n_nodes, p4d.nics) == (64, 4)
    slow = fsdp_scale.cluster(data["clusters"]["p4d"], 512, 0.3, nic_scale=0.5)
    assert slow.inter_node is not None
    assert p4d.inter_node is not None
    assert slow.inter_node.bandwidth_GBps == p4d.inter_node.bandwidth_GBps / 2
    series = next(s for s in data["series"] if s["metric"] == "megatron_tflops_per_gpu")
    point = series["points"][0]
    fast = fsdp_scale.metric(data, series, point, 1.0)
    assert fsdp_scale.metric(data, series, point, 2.0) == pytest.approx(fast / 2)
    with pytest.raises(ValueError, match="metric="):
        fsdp_scale.metric(data, {**series, "metric": "samples"}, point, 1.0)


def test_the_family_reaches_validation_goals(evaluated: dict[str, Any]) -> None:
    fam = fsdp_scale_section.family(evaluated, evaluated)
    assert fam["goal_met"] == (fam["worst"] <= fsdp_scale.GOAL_EVERY)
    assert fam["network_sensitivity"]["worst"] == fam["worst"]
    assert abs(fam["worst_case"]["error"]) == fam["worst"]
    results = {"families": {
        "nccl_tests_time": {"value": {"median": 0.1, "worst": 0.2},
                                       "worst_case": {"run": "r", "nbytes": 1,
                                                      "algorithm": "ring"}},
        "deepspeed_memory_estimator": {"value": {"median": 0, "worst": 0},
                                       "worst_case": {"id": "m"}},
        "pytorch_ddp_benchmark": {"value": {"median": 0, "worst": 0},
                                  "worst_case": {"n_gpus": 1}},
        fsdp_scale_section.NAME: fam}}
    mine = [g for g in goals(results) if g["goal"].startswith("FSDP/ZeRO-3")]
    assert len(mine) == 1
    assert mine[0]["decided_by"] == "worst"
    assert mine[0]["value"] == fam["worst"]
    assert mine[0]["median"] == fam["median"]
    section = "\n".join(fsdp_scale_section.markdown(fam))
    assert all(f"| {r['series']} | {r['point']} |" in section for r in fam["rows"])
    assert all(s in section for s in fam["series"])


def test_the_width_law_rises_with_width_and_flops_per_byte() -> None:
    a100, h100 = DEVICES["a100-80gb"], DEVICES["h100-80gb"]
    assert fsdp_width.factor(0.0, a100, 8192, 4096) == 1.0  # KAPPA 0: one flat efficiency
    assert fsdp_width.factor(10.0, a100, 4096, 4096) == 1.0
    wider = fsdp_width.factor(10.0, a100, 8192, 4096)
    assert 1 < wider < 2  # never more than the FLOPs grow
    assert fsdp_width.factor(10.0, h100, 8192, 4096) > wider  # more FLOPs per byte
    assert fsdp_width.factor(10.0, a100, 4096, 8192) == pytest.approx(1 / wider)
    assert fsdp_width.h0(10.0, a100) == pytest.approx(10 * 312e12 / 2039e9)


def test_kappa_sees_only_its_training_point(data: dict[str, Any],
                                           evaluated: dict[str, Any]) -> None:
    effs = {s["id"]: fsdp_scale.implied_efficiency(data, s, fsdp_scale.fit_point(s))
            for s in data["series"]}
    kappa = fsdp_scale.fit_kappa(data, effs)
    assert kappa == pytest.approx(evaluated["width_law"]["kappa"], abs=1e-3)
    assert kappa > 0
    sid, pid = fsdp_scale.width_train(data)
    moved = copy.deepcopy(data)
    for s in moved["series"]:
        for p in s["points"]:
            if (s["id"], p["id"]) != (sid, pid) and p["id"] != s["fit_on"]:
                p["published"] *= 2  # held-out numbers change nothing the fit returns
    assert fsdp_scale.fit_kappa(moved, effs) == kappa
    train = next(r for r in evaluated["rows"] if r["role"] == "width-law fit")
    assert abs(train["error"]) < 1e-3
    assert train["width_factor"] > 1
    assert evaluated["flat"]["worst"] > evaluated["worst"]  # the law is what closes the gap


def test_the_law_s_bytes_against_a_block_s_elementwise_bytes(
        evaluated: dict[str, Any]) -> None:
    assert fsdp_width.elementwise_bytes(4096, 11008) == 28 * 4096 + 6 * 11008
    # matmul time * h0 / h moves matmul_flops * kappa / (e_inf h) bytes at full bandwidth
    ratio = fsdp_width.bytes_ratio(10.0, 0.5, 4e8, 4096, 11008)
    assert ratio == pytest.approx(4e8 * 10 / (0.5 * 4096) / (28 * 4096 + 6 * 11008))
    assert evaluated["width_law"]["bytes_ratio"] > 1  # more than bandwidth alone explains
