"""Chapter 7 checks: the planner's rules pass, each typical wrong choice is caught."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dpsim.course.grading import get_exercise, run_check


def choose_strategy(plans, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    for p in plans:
        if max(p["peak_bytes"]) <= memory_bytes and p["step_s"] <= target_step_s:
            return p["strategy"]
    return None


def fewest_devices(curve, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    ok = [p["n_devices"] for p in curve
          if max(p["peak_bytes"]) <= memory_bytes and p["step_s"] <= target_step_s]
    return min(ok) if ok else None


def largest_global_batch(peak_at_1, peak_at_2, memory_bytes, n_devices):  # type: ignore[no-untyped-def]
    if peak_at_1 > memory_bytes:
        return 0
    return n_devices * (1 + (memory_bytes - peak_at_1) // (peak_at_2 - peak_at_1))


def choose_no_memory(plans, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    return choose_strategy(plans, 10**18, target_step_s)


def choose_last_device(plans, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    return next((p["strategy"] for p in plans if p["peak_bytes"][-1] <= memory_bytes
                 and p["step_s"] <= target_step_s), None)


def choose_fastest(plans, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    ok = [p for p in plans if max(p["peak_bytes"]) <= memory_bytes
          and p["step_s"] <= target_step_s]
    return min(ok, key=lambda p: p["step_s"])["strategy"] if ok else None


def choose_no_target(plans, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    return choose_strategy(plans, memory_bytes, float("inf"))


def fewest_largest(curve, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    ok = [p["n_devices"] for p in curve
          if max(p["peak_bytes"]) <= memory_bytes and p["step_s"] <= target_step_s]
    return max(ok) if ok else None


def fewest_no_memory(curve, memory_bytes, target_step_s):  # type: ignore[no-untyped-def]
    return fewest_devices(curve, 10**18, target_step_s)


def batch_local(peak_at_1, peak_at_2, memory_bytes, n_devices):  # type: ignore[no-untyped-def]
    return largest_global_batch(peak_at_1, peak_at_2, memory_bytes, n_devices) // n_devices


def batch_no_fixed(peak_at_1, peak_at_2, memory_bytes, n_devices):  # type: ignore[no-untyped-def]
    return n_devices * (memory_bytes // (peak_at_2 - peak_at_1))


RIGHT: list[tuple[str, Callable[..., Any]]] = [
    ("7.1", choose_strategy), ("7.2", fewest_devices), ("7.3", largest_global_batch)]
WRONG: list[tuple[str, Callable[..., Any], str]] = [
    ("7.1", choose_no_memory, "did not check memory"),
    ("7.1", choose_last_device, "device 0"),
    ("7.1", choose_fastest, "picked the fastest"),
    ("7.1", choose_no_target, "ignored the step-time target"),
    ("7.2", fewest_largest, "the fewest"),
    ("7.2", fewest_no_memory, "did not check memory"),
    ("7.3", batch_local, "local batch"),
    ("7.3", batch_no_fixed, "fixed part"),
]


@pytest.mark.parametrize(("exercise_id", "fn"), RIGHT)
def test_right_answers_pass(exercise_id: str, fn: Callable[..., Any]) -> None:
    result = run_check(exercise_id, fn)
    assert result.ok, result.message


@pytest.mark.parametrize(("exercise_id", "fn", "hint"), WRONG)
def test_wrong_answers_are_caught(exercise_id: str, fn: Callable[..., Any], hint: str) -> None:
    result = run_check(exercise_id, fn)
    assert not result.ok
    assert hint in (result.message or ""), result.message


def test_planner_functions_are_forbidden_and_cases_have_edges() -> None:
    for exercise_id in ("7.1", "7.2", "7.3"):
        assert "dpsim.sim.planner.plan" in get_exercise(exercise_id).forbidden
    assert None in [c.expected for c in get_exercise("7.1").cases()]
    assert None in [c.expected for c in get_exercise("7.2").cases()]
    # a plain-data contract: the learner gets numbers, lists and dicts only
    for case in get_exercise("7.1").cases():
        assert all(isinstance(a, (list, int, float)) for a in case.args)
