"""Run scripts/train_ddp.py under torchrun many times in a row and record every failure.

Not part of CI (a run takes several seconds; 50 rounds take minutes). Each round starts,
like tests/runtime/test_torchrun.py, a one-node run (`--standalone`, 2 processes) and a two-node
run (two torchruns, `--nnodes=2`, over 127.0.0.1) at the same time, each torchrun in its
own process group under a hard timeout, killed at the end whatever happened. A run
passes when every torchrun exits 0 and both ranks print the same checksum.

    PYTHONPATH=$PWD python scripts/stress_torchrun.py --runs 50

writes benchmarks/results/torchrun_stress.json (goal, value, goal_met, every failure with
the tail of its output, seconds, machine, torch version).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpsim.runtime.launch import free_port
from dpsim.runtime.torchrun import start_torchrun

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "train_ddp.py"
RESULTS = ROOT / "benchmarks" / "results" / "torchrun_stress.json"
CHECKSUM = re.compile(r"rank (\d+)/(\d+): final loss [\d.]+, checksum ([\d.]+)")
SETUPS = ("standalone", "two_nodes")
TAIL_CHARS = 3000  # of each torchrun's output kept for a failed run (C++ frames dropped)


@dataclass
class RunResult:
    """One run of one set-up: did it pass, how long it took (s), its output."""

    setup: str
    index: int
    passed: bool
    reason: str
    seconds: float
    output: str


def _start(args: list[str], steps: int) -> subprocess.Popen[str]:
    return start_torchrun(args, SCRIPT, ["--steps", str(steps)])


def _finish(proc: subprocess.Popen[str], deadline: float) -> tuple[int | None, str]:
    """Wait for `proc` until `deadline` (monotonic s); kill its group; exit code and output."""
    try:
        text, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        killed = ""
    except subprocess.TimeoutExpired:
        text, killed = "", "\n[killed: timeout]"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    if killed:
        text, _ = proc.communicate(timeout=10)
    return proc.returncode, text + killed


def _judge(codes: list[int | None], text: str) -> str:
    """'' when every torchrun exited 0 and ranks 0 and 1 printed one checksum, else why not."""
    if any(code != 0 for code in codes):
        return f"exit codes {codes}"
    found = {int(r): c for r, _, c in CHECKSUM.findall(text)}
    if sorted(found) != [0, 1]:
        return f"checksums of ranks {sorted(found)} printed, expected [0, 1]"
    if found[0] != found[1]:
        return f"checksums differ: {found[0]} vs {found[1]}"
    return ""


def one_round(index: int, steps: int, timeout_s: float) -> list[RunResult]:
    """Both set-ups at once (as the test runs them); one RunResult per set-up."""
    rdzv = ["--nnodes=2", "--nproc_per_node=1", f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
    started = time.monotonic()
    groups = {
        "standalone": [_start(["--standalone", "--nproc_per_node=2"], steps)],
        "two_nodes": [_start([*rdzv, f"--node_rank={n}"], steps) for n in (0, 1)],
    }
    deadline = started + timeout_s
    results = []
    for setup, procs in groups.items():
        finished = [_finish(p, deadline) for p in procs]
        codes = [code for code, _ in finished]
        reason = _judge(codes, "\n".join(out for _, out in finished))
        text = "\n".join(f"--- torchrun {i}: exit code {code}\n{_tail(out)}"
                         for i, (code, out) in enumerate(finished))
        results.append(RunResult(setup, index, not reason, reason,
                                 round(time.monotonic() - started, 2), text))
    return results


def _tail(text: str) -> str:
    """The last TAIL_CHARS of `text` without C++ stack frame lines ('frame #3: ...')."""
    kept = [line for line in text.splitlines() if not line.startswith("frame #")]
    return "\n".join(kept)[-TAIL_CHARS:]


def _machine() -> dict[str, Any]:
    import torch

    return {"platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}


def summarise(runs: list[RunResult], n: int, seconds: float, label: str) -> dict[str, Any]:
    """The results file: goal, value (passes per set-up), goal_met, failures with output."""
    passes = {s: sum(r.passed for r in runs if r.setup == s) for s in SETUPS}
    done = {s: sum(r.setup == s for r in runs) for s in SETUPS}
    failures = [asdict(r) for r in runs if not r.passed]
    return {
        "benchmark": "torchrun_stress",
        "label": label,
        "goal": f"{n} of {n} runs of each set-up pass",
        "value": {s: f"{passes[s]} of {done[s]}" for s in SETUPS},
        "goal_met": all(passes[s] == done[s] == n for s in SETUPS),
        "runs_per_setup": n,
        "passes": passes,
        "failures": failures,
        "worst_case": failures[0] if failures else None,
        "run_seconds_max": max((r.seconds for r in runs), default=0.0),
        "seconds": round(seconds, 1),
        "machine": _machine(),
    }


def before_summary(before: dict[str, Any]) -> dict[str, Any]:
    """What an earlier results file (a run before a fix) found: value, failures, machine."""
    keys = ("label", "value", "goal_met", "runs_per_setup", "passes", "failures", "seconds",
            "machine")
    return {k: before.get(k) for k in keys}


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print a line per round, write the results file; 0 if goal met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs of each set-up")
    parser.add_argument("--steps", type=int, default=3, help="training steps per run")
    parser.add_argument("--timeout", type=float, default=100.0, help="s per round")
    parser.add_argument("--label", default="", help="a note stored in the results")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results file")
    parser.add_argument("--before", type=Path, default=None,
                        help="results file of a run before a fix, kept under 'before_fix'")
    args = parser.parse_args(argv)
    started = time.monotonic()
    runs: list[RunResult] = []
    for i in range(args.runs):
        results = one_round(i, args.steps, args.timeout)
        runs += results
        line = ", ".join(f"{r.setup} {'ok' if r.passed else 'FAIL: ' + r.reason}"
                         for r in results)
        print(f"round {i + 1}/{args.runs} ({results[0].seconds:.1f} s): {line}", flush=True)
        for r in results:
            if not r.passed:
                print(r.output, flush=True)
    result = summarise(runs, args.runs, time.monotonic() - started, args.label)
    if args.before is not None:
        result["before_fix"] = before_summary(json.loads(args.before.read_text()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.goals import stamp

    stamp(result, "torchrun_stress")  # goals, value, goal_met, median and worst case
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['value']} passed; goal met: {result['goal_met']}; wrote {args.out}")
    return 0 if result["goal_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
