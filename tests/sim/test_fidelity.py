"""`python -m dpsim validate` over the shipped dataset: the results' structure, a citation
for every point, held-out errors apart from the fit residual, the files it writes."""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dpsim.reports import validation as report
from dpsim.sim.fidelity import collectives
from dpsim.sim.fidelity import memory as fidelity_memory


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    return report.run()  # one fit for the whole module (a few seconds of CPU)


def test_every_run_and_point_has_a_citation_and_a_configuration() -> None:
    runs = collectives.load_runs()
    assert len(runs) >= 4
    for run in runs:
        src = run["source"]
        assert src["repo"]
        assert src["url"] if src.get("kind") == "issue" else src["path"]
        assert src.get("kind") == "issue" or len(src["commit"]) == 40
        assert src["where"]
        assert run["config"]
        assert run["points"]
        for p in run["points"]:
            assert p["nbytes"] > 0
            assert p["time_us"] > 0
    memory = json.loads(Path(fidelity_memory.DATA).read_text())
    assert len(memory["source"]["commit"]) == 40
    assert all(p["where"] for p in memory["points"])


def test_results_hold_goals_values_and_worst_cases(results: dict[str, Any]) -> None:
    for family in results["families"].values():
        assert {"goal", "value", "goal_met", "worst_case", "rows"} <= set(family)
    coll = results["families"]["nccl_tests_time"]
    rows = coll["rows"]
    assert len(rows) == coll["n_points"]
    assert coll["n_held_out"] == sum(r["held_out"] for r in rows)
    held = [abs(r["error"]) for r in rows if r["held_out"]]
    assert coll["value"]["worst"] == pytest.approx(max(held), abs=1e-4)
    assert abs(coll["worst_case"]["error"]) == pytest.approx(max(held), abs=1e-4)
    assert coll["shipped_constants_match_fit"]  # the library ships what this fit finds
    for fam in coll["by_family"].values():  # every family: held-out median <= worst
        assert 0 <= fam["median"] <= fam["worst"] == abs(fam["worst_case"]["error"])
    assert {f["worst"] for f in coll["by_family"].values()} >= {coll["value"]["worst"]}
    assert sum(f["n_held_out"] for f in coll["by_family"].values()) == coll["n_held_out"]
    assert set(coll["runs"]) == {r["run"] for r in rows}
    assert results["families"]["deepspeed_memory_estimator"]["goal_met"]
    ddp_rows = results["families"]["pytorch_ddp_benchmark"]["rows"]
    assert [r["n_gpus"] for r in ddp_rows] == [1, 2, 4, 8, 16]
    assert all(r["held_out"] and r["where"] for r in ddp_rows)
    assert results["not_covered"]


def test_the_fit_sees_only_the_training_half() -> None:
    pts = [p for p in collectives.points(collectives.load_runs()) if p.run.startswith("p4de")]

    def fit(points: list[collectives.Point]) -> object:
        return collectives.fit([p for p in points if not p.held_out], rounds=1)

    train = fit(pts)
    slower = [replace(p, time_us=p.time_us * (1 if p.held_out else 2)) for p in pts]
    assert fit(slower) != train
    # changing held-out points changes nothing the fit returns
    assert fit([replace(p, time_us=1.0) if p.held_out else p for p in pts]) == train


def test_the_report_writes_its_three_files(results: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    md = report.markdown(results)
    assert "held-out" in md
    assert "Not covered" in md
    assert md.count("| p5-2x8-allreduce |") > 20
    fig = report.figure(results["families"]["nccl_tests_time"]["rows"])
    assert len(fig["data"]) == 2 * len(results["families"]["nccl_tests_time"]["runs"])


def test_the_shipped_constants_predict_what_the_fit_predicts(results: dict[str, Any]) -> None:
    fitted = results["families"]["nccl_tests_time"]["rows"]
    shipped = collectives.shipped_rows()
    assert [r["predicted_us"] for r in shipped] == pytest.approx(
        [r["predicted_us"] for r in fitted], rel=1e-6)
    summary = collectives.held_out_summary(shipped)
    assert set(summary) == {r["id"] for r in collectives.load_runs()}
    assert all(0 <= med <= worst for med, worst in summary.values())


def test_every_data_file_is_read_and_a_forced_algorithm_is_obeyed() -> None:
    files = collectives.data_files()
    assert collectives.DATA in files
    ids = [r["id"] for f in files for r in json.loads(f.read_text())["runs"]]
    assert [r["id"] for r in collectives.load_runs()] == ids
    assert collectives.forced("x NCCL_ALGO=Ring NCCL_PROTO=Simple y") == ("ring", "Simple")
    assert collectives.forced("NCCL_PROTO=ll128") == ("auto", "LL128")
    assert collectives.forced("NCCL_PROTO=LL,Simple; no override") == ("auto", "auto")
    p = collectives.points(collectives.load_runs(collectives.DATA))[0]
    free_us, _ = collectives.run_predictions([p])
    ring_us, ring_pair = collectives.run_predictions([replace(p, forced=("ring", "Simple"))])
    assert ring_pair == ["ring/Simple"]
    assert ring_us[0] >= free_us[0]
