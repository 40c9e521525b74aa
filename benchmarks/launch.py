"""Launcher benchmark: how soon a failed or hung rank reaches the notebook as an error.

    .venv/bin/python -m benchmarks.launch [--repeats N]

On 2 gloo ranks, rank 1 fails in each of four ways while rank 0 waits in a collective:
it raises, it is killed (SIGKILL), it exits with code 7, or it hangs past `timeout_s`.
The reaction time is measured from the moment rank 1 failed (it writes the wall-clock
time to a file first; start-up is not counted) to the moment `launch` raised, and for a
hang from the end of `timeout_s`. Goal: <= 2 s for every repeat (the worst case decides).

Beside it, the start-up of a launch that does nothing on 2 ranks, with ranks forked from
the fork server (the default where there is one; the first launch also starts the server)
and spawned (DPSIM_START_METHOD=spawn): seconds from `launch` called to returned.

The unit tests (tests/runtime/test_launch.py) only check that these errors come, with a loose
bound that catches a hang; the speed goal lives here.

Writes benchmarks/results/launch.json (every number measured in this one run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.goals import stamp

RESULTS = Path(__file__).resolve().parent / "results" / "launch.json"
GOAL_S = 2.0
HANG_TIMEOUT_S = 5.0  # the launch timeout in the hang case, seconds
WAYS = ("raise", "sigkill", "exit", "hang")


def failing_rank(rank: int, world_size: int, how: str, marker: str) -> int:
    """Rank 1 fails in the way `how`, after writing the time it did; rank 0 waits on it."""
    import torch
    import torch.distributed as dist

    if rank == 1:
        if how == "hang":
            time.sleep(1e9)
        Path(marker).write_text(repr(time.time()))
        if how == "raise":
            raise ValueError("rank 1 fails on purpose")
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(7)
    dist.all_reduce(torch.ones(1))
    return rank


def reaction_s(how: str) -> float:
    """Seconds from rank 1's failure (or the end of the timeout) to `launch` raising."""
    from dpsim.runtime.launch import LaunchError, launch

    with tempfile.TemporaryDirectory() as tmp:
        marker = str(Path(tmp) / "failed")
        timeout_s = HANG_TIMEOUT_S if how == "hang" else 120.0
        start = time.time()
        try:
            launch(failing_rank, 2, args=(how, marker), backend="gloo", timeout_s=timeout_s)
        except LaunchError:
            raised = time.time()
        else:
            raise RuntimeError(f"launch returned although rank 1 failed ({how})")
        failed = start + timeout_s if how == "hang" else float(Path(marker).read_text())
        return raised - failed


def _nothing(rank: int, world_size: int) -> int:
    return rank


def start_up_s(method: str, repeats: int) -> list[float]:
    """Seconds of `repeats` launches of `_nothing` on 2 ranks started by `method`."""
    from dpsim.runtime.launch import launch

    before = os.environ.get("DPSIM_START_METHOD")
    os.environ["DPSIM_START_METHOD"] = method
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            launch(_nothing, 2, backend="gloo")
            times.append(round(time.perf_counter() - start, 3))
        return times
    finally:
        if before is None:
            del os.environ["DPSIM_START_METHOD"]
        else:
            os.environ["DPSIM_START_METHOD"] = before


def main(argv: list[str]) -> None:
    """Run the benchmark and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="launches per way of failing")
    args = parser.parse_args(argv)

    import torch

    started = time.perf_counter()
    start_up = {method: start_up_s(method, args.repeats + 1) for method in ("forkserver", "spawn")}
    ways: dict[str, Any] = {}
    for how in WAYS:
        times = [reaction_s(how) for _ in range(args.repeats)]
        ways[how] = {"reaction_s": [round(t, 3) for t in times],
                     "median_s": round(statistics.median(times), 3),
                     "worst_s": round(max(times), 3)}
    worst_way = max(ways, key=lambda w: ways[w]["worst_s"])
    worst = ways[worst_way]["worst_s"]
    result = {
        "benchmark": "launch",
        "goal": f"a failed or hung rank is reported within {GOAL_S:g} s, every repeat",
        "goal_s": GOAL_S,
        "value_s": worst,
        "goal_met": worst <= GOAL_S,
        "worst_case": {"way": worst_way, "reaction_s": worst},
        "median_s": statistics.median(t for w in ways.values() for t in w["reaction_s"]),
        "ways": ways,
        "repeats": args.repeats,
        "hang_timeout_s": HANG_TIMEOUT_S,
        "start_up_definition": "seconds from launch() called to returned, 2 gloo ranks that "
                               "do nothing; forkserver's first launch starts the fork server",
        "start_up_s": {method: {"each": t, "median_s": statistics.median(t[1:] if method ==
                                                                          "forkserver" else t)}
                       for method, t in start_up.items()},
        "machine": {
            "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "seconds": round(time.perf_counter() - started, 1),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    stamp(result, "launch")  # goals, value, goal_met, median and worst case
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for how, w in ways.items():
        print(f"{how:>8}: median {w['median_s']:.2f} s, worst {w['worst_s']:.2f} s")
    for method, t in start_up.items():
        print(f"start-up, {method}: {t} s")
    print(f"worst {worst:.2f} s ({worst_way}); goal <= {GOAL_S:g} s: "
          f"{'met' if result['goal_met'] else 'NOT met'}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
