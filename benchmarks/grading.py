"""Grading benchmark: how long `python -m dpsim grade` takes on the six solution notebooks.

    .venv/bin/python -m benchmarks.grading [--repeats N]

Each repeat grades solutions/0[1-6]*.ipynb in one grader run (every notebook in its own
kernel, every exercise in the sandbox) and must give full marks. Goal: <= 120 s wall time
on a 2-core machine, every repeat (the worst case decides). The machine is shared, so the
load average before and after each repeat and the CPU seconds used (this process and the
processes it waited for) are recorded beside the wall time.

Writes benchmarks/results/grading.json (every number measured in this one run).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "grading.json"
GOAL_S = 120.0


def _cpu_s() -> float:
    own, children = (resource.getrusage(resource.RUSAGE_SELF),
                     resource.getrusage(resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def one_run(paths: list[Path]) -> dict[str, Any]:
    """Grade the notebooks once; wall and CPU seconds, load, per-notebook seconds."""
    from dpsim.course.grader import Grader

    load_before, cpu_before = os.getloadavg(), _cpu_s()
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), Grader() as grader:
        grades = [grader.grade(p) for p in paths]
    wall = time.perf_counter() - started
    full = all(g.points == g.max_points > 0 and not g.errors for g in grades)
    return {"wall_s": round(wall, 1), "cpu_s": round(_cpu_s() - cpu_before, 1),
            "full_marks": full, "load_before": [round(x, 1) for x in load_before],
            "load_after": [round(x, 1) for x in os.getloadavg()],
            "notebooks_s": {Path(g.path).name: round(g.seconds, 1) for g in grades}}


def main(argv: list[str]) -> None:
    """Run the benchmark and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="grader runs")
    args = parser.parse_args(argv)
    import torch

    paths = sorted((ROOT / "solutions").glob("0[1-6]*.ipynb"))
    runs = [one_run(paths) for _ in range(args.repeats)]
    worst = max(runs, key=lambda r: r["wall_s"])
    result = {
        "benchmark": "grading",
        "goal": "the six solution notebooks are graded in <= 120 s on 2 cores, every repeat",
        "goal_s": GOAL_S, "value_s": worst["wall_s"],
        "worst_case": worst, "runs": runs,
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "cpu_count": os.cpu_count(),
                    "load_average": worst["load_before"]},
    }
    from benchmarks.goals import stamp

    stamp(result, "grading")  # goals, value, goal_met, median and worst case
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("value_s", "goal_met")}))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
