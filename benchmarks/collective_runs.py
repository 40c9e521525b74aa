"""The collective model on published runs it never saw: each nccl-tests run left out of the
fit in turn (`dpsim.sim.fidelity.leave_run_out`), about 80 s.

    python -m benchmarks collective_runs

Writes benchmarks/results/collective_runs.json. Nothing is timed: the model is evaluated.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.goals import stamp

RESULTS = Path(__file__).resolve().parent / "results"
MEDIAN_GOAL, EVERY_POINT_GOAL = 0.15, 0.30  # the collective goals, on unseen runs


def main(argv: list[str]) -> int:
    """Leave each run out, predict it, write the results file; return 0."""
    from dpsim.sim import fidelity

    result = {"benchmark": "collective_runs",
              "device": "this machine's CPU (the model is evaluated, nothing is timed)",
              "definition": "each published nccl-tests run whose bottleneck link (network, "
                            "or NVSwitch on one node) appears in another run is left out of "
                            "the fit; the constants are fitted on every point of the other "
                            "runs; error = predicted / published - 1 at every size of it",
              "median_goal": MEDIAN_GOAL, "every_point_goal": EVERY_POINT_GOAL,
              **fidelity.leave_run_out.evaluate()}
    stamp(result, "collective_runs")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "collective_runs.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"runs left out: {len(result['rows'])}; points: {result['n_points']}; median "
          f"{result['median']:.1%}; within 30 %: {result['within_30_percent']:.0%}; worst "
          f"{result['worst']}")
    return 0
