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


def one_run(paths: list[Path], isolate: bool) -> dict[str, Any]:
    """Grade the notebooks once (each in its OS box, or not); wall and CPU seconds, load,
    per-notebook seconds."""
    from dpsim.course.grading.grade import Grader, read_submission

    load_before, cpu_before = os.getloadavg(), _cpu_s()
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), Grader(isolate=isolate) as grader:
        grades = [grader.grade(read_submission(p)) for p in paths]
    wall = time.perf_counter() - started
    full = all(g.points == g.max_points > 0 and not g.errors for g in grades)
    return {"isolated": isolate, "wall_s": round(wall, 1), "cpu_s": round(_cpu_s() - cpu_before, 1),
            "full_marks": full, "load_before": [round(x, 1) for x in load_before],
            "load_after": [round(x, 1) for x in os.getloadavg()],
            "notebooks_s": {Path(g.path).name: round(g.seconds, 1) for g in grades}}


def box_start_ms(repeats: int = 10) -> dict[str, float]:
    """`python -I -c pass` plain and in an OS box (milliseconds, mean of `repeats`)."""
    import subprocess
    import sys

    from dpsim.course.grading import box

    limits = box.BoxLimits()
    argv = [sys.executable, "-I", "-c", "pass"]

    def mean_ms(cmd: list[str], **kw: Any) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            subprocess.run(cmd, check=True, **kw)
        return (time.perf_counter() - started) / repeats * 1e3

    plain = mean_ms(argv)
    boxed = mean_ms(box.command(argv, None, {}, limits), preexec_fn=box.rlimits(limits))
    return {"plain_ms": round(plain, 1), "boxed_ms": round(boxed, 1),
            "box_start_ms": round(boxed - plain, 1)}


def main(argv: list[str]) -> None:
    """Run the benchmark and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="grader runs")
    args = parser.parse_args(argv)
    import torch

    from dpsim.course.grading.box import unavailable

    paths = sorted((ROOT / "solutions").glob("0[1-6]*.ipynb"))
    why = unavailable()
    runs = [one_run(paths, isolate=True) for _ in range(args.repeats)] if why is None else []
    unboxed = [one_run(paths, isolate=False) for _ in range(args.repeats)]
    worst = max(runs or unboxed, key=lambda r: r["wall_s"])
    per_notebook = None
    if runs:  # what the OS box costs one notebook: boxed minus unboxed, median notebook
        costs = sorted(b["notebooks_s"][n] - u["notebooks_s"][n]
                       for b, u in zip(runs, unboxed, strict=True) for n in b["notebooks_s"])
        per_notebook = {"median_s": round(costs[len(costs) // 2], 1),
                        "worst_s": round(costs[-1], 1)}
    result = {
        "benchmark": "grading",
        "goal": "the six solution notebooks are graded in <= 120 s on 2 cores, every repeat, "
                "each notebook in its own OS box (bubblewrap)",
        "goal_s": GOAL_S, "value_s": worst["wall_s"],
        "worst_case": worst, "runs": runs, "unboxed_runs": unboxed,
        "box_cost_per_notebook_s": per_notebook,
        "box_start": box_start_ms() if why is None else None,
        "box_unavailable": why,
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
