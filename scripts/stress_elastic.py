"""Run the elastic restart (scripts/train_elastic.py under torchrun) many times in a row.

Not part of CI (one round takes 15-45 s). Each round starts, like the slow test, two
torchrun jobs at once: one in which rank 1 is SIGKILLed before step 5 (--max-restarts=3)
and one without a failure. A round passes when both exit 0, the killed job restarted and
resumed from its last checkpoint, and its final parameters are bitwise equal to those of
the job without the failure. The attempts each job needed are recorded.

    PYTHONPATH=$PWD python scripts/stress_elastic.py --runs 20

writes benchmarks/results/elastic_stress.json (goal, value, goal_met, every failure with
the tail of its output, seconds, machine, torch version).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dpsim.labs.ch10_failures.elastic import ElasticRun, Scenario, run_elastic, same_params

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "elastic_stress.json"
# 3 restarts: one for the kill, the others for a transient failure of gloo's join after a
# restart (connectFullMesh "Connection refused", seen on a loaded machine), which torchrun
# handles like any failed worker
SCENARIOS = (Scenario("killed", 3, kill_at=5), Scenario("clean", 3))


def judge(runs: dict[str, ElasticRun]) -> str:
    """'' when the round passed, else why not."""
    killed, clean = runs["killed"], runs["clean"]
    if (killed.exit_code, clean.exit_code) != (0, 0):
        return f"exit codes killed={killed.exit_code}, clean={clean.exit_code}"
    if killed.attempts < 2:
        return f"killed job ran {killed.attempts} attempt, expected a restart"
    if not any(e["event"] == "resume" and e["attempt"] == 1 for e in killed.events):
        return "the restarted job did not resume from a checkpoint"
    if not same_params(killed.params, clean.params):
        return "final parameters differ from the run without the failure"
    return ""


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print a line per round, write the results file; 0 if goal met."""
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    failures: list[dict[str, Any]] = []
    seconds: list[float] = []
    attempts: list[dict[str, int]] = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as d:
            runs = run_elastic(d, SCENARIOS)
        reason = judge(runs)
        seconds.append(round(max(r.seconds for r in runs.values()), 1))
        attempts.append({n: r.attempts for n, r in runs.items()})
        if reason:
            failures.append({"index": i, "reason": reason,
                             "output": {n: r.output[-3000:] for n, r in runs.items()}})
        print(f"round {i + 1}/{args.runs} ({seconds[-1]} s): {reason or 'ok'}", flush=True)
        if reason:
            for name, run in runs.items():
                print(f"--- {name}: exit code {run.exit_code}\n{run.output[-3000:]}", flush=True)
    passed = args.runs - len(failures)
    result = {
        "benchmark": "elastic_stress",
        "goal": f"{args.runs} of {args.runs} elastic restarts end with the parameters of the "
                "run without the failure",
        "runs": args.runs, "passed": passed,
        "failures": failures, "attempts": attempts, "worst_case": failures[0] if failures else None,
        "round_seconds_median": sorted(seconds)[len(seconds) // 2] if seconds else 0.0,
        "round_seconds_max": max(seconds, default=0.0),
        "seconds": round(time.monotonic() - started, 1),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "cpu_count": os.cpu_count(),
                    "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None},
    }
    sys.path.insert(0, str(ROOT))
    from benchmarks.goals import stamp

    stamp(result, "elastic_stress")  # goals, value, goal_met, median and worst case
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{passed} of {args.runs} passed; goal met: {result['goal_met']}; wrote {args.out}")
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
