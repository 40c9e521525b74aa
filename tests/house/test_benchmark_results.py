"""Every benchmarks/results/*.json says its goals as they are: value, goal_met, median and
the worst case with its configuration; the file's goal_met is true only if all are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.goals import GOALS, stamp

RESULTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "results")
                 .glob("*.json"))


def test_there_are_results() -> None:
    assert len(RESULTS) >= 6


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_results_file_records_every_goal(path: Path) -> None:
    result = json.loads(path.read_text())
    goals = result["goals"]
    assert goals, f"{path.name}: no goals"
    for g in goals:
        assert {"goal", "value", "target", "goal_met", "median", "worst"} <= set(g), g
        assert {"value", "config"} <= set(g["worst"]), g
        assert isinstance(g["goal_met"], bool)
        met = g["value"] <= g["target"] if g["better"] == "lower" else g["value"] >= g["target"]
        assert g["goal_met"] == met, f"{path.name}: {g['goal']}"
        if g["decided_by"] == "worst":
            assert g["value"] == g["worst"]["value"], f"{path.name}: {g['goal']}"
    assert result["goal_met"] == all(g["goal_met"] for g in goals), path.name
    name = result.get("benchmark") or path.stem
    assert name in GOALS
    assert stamp(json.loads(path.read_text()), name)["goals"] == goals, (
        f"{path.name} is stale: run python -m benchmarks.goals")


def test_readme_quotes_the_goals_as_they_are() -> None:
    from benchmarks.goals import readme_table

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    quoted = readme.split("<!-- goals:begin -->\n")[1].split("\n<!-- goals:end -->")[0]
    assert quoted == readme_table(), "run: python -c 'from benchmarks.goals import readme_table'"
