"""Fuzz of the public API: does every invalid call get a ValueError naming its field?

    python -m benchmarks.fuzz_api [--out PATH] [--only PATTERN]

For every entry point of the public API's boundary (`benchmarks.api_surface`: found by
walking the package, each with a valid call derived from its signature and type hints), the
valid call runs first; then ONE argument at a time is replaced by each of its perturbations
(`benchmarks.api_args.perturbations`: wrong types, a bool for a number, NaN, inf, negative
numbers, unknown choices, bad sequence elements). Each call runs in the main thread under a
1 s SIGALRM bound, with the address space capped (2 GiB more per call) so that a request for
a huge allocation fails instead of exhausting the machine. Outcomes:

* valueerror_right_field: a ValueError whose message names `<argument>=` (or `<argument>[`);
* valueerror_wrong_field: a ValueError naming something else;
* other_exception: any other exception (by type);
* accepted: the call returned; its result is then walked for NaN, inf and negative numbers
  (`garbage`, counted separately);
* hang: no return within the bound.

Edges of a hint's domain (zero, huge, empty, another valid object) are not invalid calls:
they may be accepted or refused by name, but a hang, another exception, a ValueError naming
another field, or garbage on them is still a failure. Goal: >= 98 % of invalid calls get a
ValueError naming the right field; no hang; no garbage (and every entry point has a valid
base call that returns clean). Writes benchmarks/results/fuzz_api.json with totals, the
percentage, `goal_met`, counts per entry point and every failing call (the worst cases).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from benchmarks.api_args import EDGE, EDGES, perturbations
from benchmarks.api_harness import Outcome, bad_numbers, call_bounded, names_field
from benchmarks.api_surface import EntryPoint, entry_points, skipped
from benchmarks.goals import dumps, stamp

RESULTS = Path(__file__).resolve().parent / "results" / "fuzz_api.json"
GOAL = ">= 98 % of invalid calls get a ValueError naming the right field; no hang; no garbage"
GOAL_PCT = 98.0
SECONDS = 1.0  # time bound per call
MESSAGE_CHARS = 200  # of an exception or of the garbage found, in the results file
READ_SECONDS = 10.0  # time bound for walking one result (its properties included)
OUTCOMES = ("valueerror_right_field", "valueerror_wrong_field", "other_exception", "accepted",
            "hang")


@dataclass(frozen=True)
class Call:
    """One fuzzed call and what it did."""

    entry: str
    arg: str  # "" for the valid base call
    label: str  # the perturbation ("base" for the valid call)
    value: str  # repr of the value passed (shortened)
    valid_because: str | None  # why an edge may be accepted; None: invalid
    outcome: str  # one of OUTCOMES
    message: str  # the exception, or the garbage found
    garbage: bool
    seconds: float

    @property
    def failed(self) -> bool:
        """An invalid call not refused by name; any hang, crash or garbage; a bad base call."""
        if self.garbage or self.outcome == "hang":
            return True
        if self.label == "base":
            return self.outcome != "accepted"
        if self.valid_because is not None:  # accepted, or refused by its own name
            return self.outcome in ("other_exception", "valueerror_wrong_field")
        return self.outcome != "valueerror_right_field"


def _short(value: Any, n: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= n else text[:n - 3] + "..."


def classify(entry: EntryPoint, arg: str, outcome: Outcome) -> tuple[str, str, bool]:
    """(outcome class, message, garbage) of one call that perturbed `arg`."""
    if outcome.status == "hang":
        return "hang", str(outcome.error), False
    err = outcome.error
    result = outcome.result
    if outcome.status == "returned" and entry.errors_as_text:
        first = result[0] if isinstance(result, list | tuple) and result else result
        if isinstance(first, str) and first.startswith(entry.errors_as_text):
            err = ValueError(first[len(entry.errors_as_text):])
    if err is not None:
        message = f"{type(err).__name__}: {err}"[:MESSAGE_CHARS]
        if isinstance(err, ValueError):
            right = arg == "" or names_field(str(err), arg)
            return ("valueerror_right_field" if right else "valueerror_wrong_field"), message, False
        return "other_exception", message, False
    walk = call_bounded(lambda: bad_numbers(result, text=entry.text),
                        READ_SECONDS)
    if walk.status == "hang":  # reading the result (its properties included) hangs
        return "hang", f"reading the result took over {READ_SECONDS} s", False
    if walk.status == "raised":
        error = f"{type(walk.error).__name__}: {walk.error}"
        return "accepted", f"reading the result raised {error}"[:MESSAGE_CHARS], True
    bad = walk.result
    return "accepted", "; ".join(bad)[:MESSAGE_CHARS], bool(bad)


def fuzz_entry(entry: EntryPoint) -> list[Call]:
    """The base call and every one-argument perturbation of `entry`."""
    calls = []
    cases: list[tuple[str, str, Any, str | None]] = [("", "base", None, "the valid base call")]
    cases += [(a.name, lbl, v, EDGE if edge else None) for a in entry.args
              for lbl, v, edge in perturbations(a)]
    for arg, lbl, value, valid_because in cases:
        overrides = {arg: value} if arg else {}
        outcome = call_bounded(lambda o=overrides: entry.call(**o), SECONDS)  # type: ignore[misc]
        kind, message, garbage = classify(entry, arg, outcome)
        calls.append(Call(entry.name, arg, lbl, "" if not arg else _short(value),
                          valid_because, kind, message, garbage, round(outcome.elapsed_s, 4)))
    return calls


def _coverage(entries: tuple[EntryPoint, ...]) -> dict[str, Any]:
    underived = {e.name: e.problem for e in entry_points() if e.problem}
    return {"entry_points": len(entries), "skipped": skipped(), "uncovered": underived}


def summarize(calls: list[Call], entries: tuple[EntryPoint, ...]) -> dict[str, Any]:
    """The results file's content."""
    invalid = [c for c in calls if c.valid_because is None]
    totals = Counter(c.outcome for c in invalid)
    right = totals["valueerror_right_field"]
    pct = 100.0 * right / len(invalid) if invalid else 100.0
    hangs = sum(c.outcome == "hang" for c in calls)
    garbage = sum(c.garbage for c in calls)
    base_failures = [c for c in calls if c.label == "base" and c.failed]
    per_entry: dict[str, dict[str, int]] = {}
    for c in calls:
        row = per_entry.setdefault(c.entry, {"calls": 0, "invalid": 0, "failed": 0,
                                             "garbage": 0, **dict.fromkeys(OUTCOMES, 0)})
        row["calls"] += 1
        row["invalid"] += c.valid_because is None
        row["failed"] += c.failed
        row["garbage"] += c.garbage
        if c.valid_because is None:
            row[c.outcome] += 1
    failing = [c for c in calls if c.failed]
    coverage = _coverage(entry_points())
    return {
        "benchmark": "fuzz_api",
        "goal": GOAL,
        "goal_pct_right_field": GOAL_PCT,
        "value": round(pct, 2),
        "pct_right_field": round(pct, 2),
        "goal_met": (pct >= GOAL_PCT and hangs == 0 and garbage == 0 and not base_failures
                     and not coverage["uncovered"]),  # every boundary name has a valid call
        "time_bound_s": SECONDS,
        "entry_points": len(entries),
        "calls": len(calls),
        "invalid_calls": len(invalid),
        "valid_calls": len(calls) - len(invalid),
        "totals_invalid": {k: totals[k] for k in OUTCOMES},
        "totals_valid": dict(Counter(c.outcome for c in calls if c.valid_because is not None)),
        "hangs": hangs,
        "garbage": garbage,
        "other_exception_types": dict(Counter(
            c.message.split(":")[0] for c in calls if c.outcome == "other_exception")),
        "failed_calls": len(failing),
        "base_failures": [c.__dict__ for c in base_failures],
        "per_entry_point": per_entry,
        "coverage": coverage,
        "edges": sorted(EDGES | {"other_<n>"}),
        "worst_cases": [{k: v for k, v in c.__dict__.items() if k not in ("valid_because",
                                                                          "seconds")}
                        | {"valid_input": c.valid_because is not None} for c in failing],
    }


def _print(result: dict[str, Any], seconds: float) -> None:
    print(f"{result['entry_points']} entry points, {result['calls']} calls "
          f"({result['invalid_calls']} invalid, {result['valid_calls']} valid) in {seconds:.0f} s")
    for k, v in result["totals_invalid"].items():
        print(f"  {k:24s} {v}")
    print(f"  hangs {result['hangs']}, garbage {result['garbage']}, "
          f"other exceptions {result['other_exception_types']}")
    print(f"right field: {result['pct_right_field']} % (goal >= {GOAL_PCT} %), "
          f"goal_met: {result['goal_met']}")
    worst = sorted(result["per_entry_point"].items(), key=lambda kv: -kv[1]["failed"])[:15]
    print("most failing entry points: " + ", ".join(f"{k} {v['failed']}" for k, v in worst
                                                    if v["failed"]))
    if result["coverage"]["uncovered"]:
        print(f"no valid call derived: {result['coverage']['uncovered']}")


def main(argv: list[str]) -> int:
    """Run the fuzz; write the results file; return 0."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_api")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results file")
    parser.add_argument("--only", default="*", help="fnmatch pattern over entry-point names")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    entries = tuple(e for e in entry_points() if fnmatchcase(e.name, args.only)
                    and not e.problem)
    calls: list[Call] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for entry in entries:
            calls += fuzz_entry(entry)
    seconds = time.perf_counter() - start
    result = summarize(calls, entries)
    result["seconds"] = round(seconds, 1)
    result["machine"] = {"platform": platform.platform(), "python": platform.python_version()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    stamp(result, "fuzz_api")  # goals, value, goal_met, median and worst case
    args.out.write_text(dumps(result), encoding="utf-8")
    _print(result, seconds)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
