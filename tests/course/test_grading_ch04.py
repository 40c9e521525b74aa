"""Chapter 4 checks: the right answers pass, and each typical wrong answer is caught."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from dpsim.course.grading import ExerciseFailed, check, core, run_check
from dpsim.sim.cost.gil import predict_speedup as library_speedup
from dpsim.sim.cost.gil import schedule


def answer_hidden(result: core.CheckResult) -> bool:
    """True if the failed case's expected value is nowhere in the message (label aside)."""
    assert result.message is not None
    body = result.message.replace(result.failed_label or "", "")
    body = re.sub(r"\(\d+ of \d+ cases passed\)", "", body)
    return str(result.expected) not in body


def predicted_speedup(gil_share: float, n_threads: int, n_cores: int) -> float:
    bound = min(n_threads, n_cores)
    return min(bound, 1 / gil_share) if gil_share > 0 else float(bound)


def gil_share(intervals: list[tuple[str, float, float]]) -> float:
    python = sum(end - start for kind, start, end in intervals if kind == "python")
    native = sum(end - start for kind, start, end in intervals if kind == "native")
    return python / (python + native)


def measured_speedup(times_s: dict[int, float]) -> dict[int, float]:
    return {k: k * times_s[1] / t for k, t in times_s.items()}


def test_right_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    check("4.1", predicted_speedup)
    check("4.1", lambda g, n, c: max(1.0, predicted_speedup(g, n, c)))
    assert all(library_speedup(g, n, c) == predicted_speedup(g, n, c)  # the library agrees
               for g, n, c in ((0.0, 4, 8), (0.5, 4, 8), (0.1, 8, 2)))
    check("4.2", gil_share)
    check("4.3", measured_speedup)
    assert capsys.readouterr().out == ("PASS 4.1 (5/5)\nPASS 4.1 (5/5)\nPASS 4.2 (3/3)\n"
                                       "PASS 4.3 (3/3)\n")


def _span(iv: list[tuple[str, float, float]]) -> float:
    return iv[-1][2] - iv[0][1]


WRONG: list[tuple[str, Callable[..., Any], str]] = [
    ("4.1", lambda g, n, c: 1 / (g + (1 - g) / n), "Amdahl"),
    ("4.1", lambda g, n, c: min(n, 1 / g) if g else float(n), "ignored the cores"),
    ("4.1", lambda g, n, c: n * (1 - g), "GIL-free share"),
    ("4.1", lambda g, n, c: min(1 / g, c) if g else float(c), "number of threads"),
    ("4.1", lambda g, n, c: 1 / g if g else float(n), "the smallest"),
    ("4.1", lambda g, n, c: float(max(n, c, 1 / g if g else 0)), "largest of the limits"),
    ("4.1", lambda g, n, c: "fast", "number"),
    ("4.2", lambda iv: sum(e - s for k, s, e in iv if k == "python") / _span(iv),
     "whole span"),
    ("4.2", lambda iv: 1 - gil_share(iv), "GIL-free share"),
    ("4.2", lambda iv: 0.5, "intervals, not seconds"),
    ("4.3", lambda t: {k: t[1] / v for k, v in t.items()}, "t(1) / t(k)"),
    ("4.3", lambda t: {k: v / (k * t[1]) for k, v in t.items()}, "inverted"),
    ("4.3", lambda t: [k * t[1] / v for k, v in t.items()], "the answer is a dict"),
]


@pytest.mark.parametrize(("exercise_id", "fn", "hint"), [
    pytest.param(i, fn, hint, id=f"{i}-{n}") for n, (i, fn, hint) in enumerate(WRONG)])
def test_wrong_answer_is_caught_with_its_hint(exercise_id: str, fn: Callable[..., Any],
                                              hint: str) -> None:
    with pytest.raises(ExerciseFailed) as info:
        check(exercise_id, fn)
    assert hint in str(info.value), str(info.value)
    result = run_check(exercise_id, fn)
    assert answer_hidden(result), result.message
    assert str(info.value) == result.message


# --- 4.4 ------------------------------------------------------------------------------------


def threads_or_processes(intervals: list[tuple[str, float, float]], n_workers: int,
                         n_cores: int, start_s: float, *, shared_gil: bool = False,
                         start: bool = True, cores: bool = True, swap: bool = False,
                         gaps: bool = False) -> dict[str, Any]:
    kinds = {"python": "free", "native": "gil"} if swap else {"python": "gil", "native": "free"}
    segments, last = [], None
    for kind, begin, end in sorted(intervals, key=lambda iv: iv[1]):
        if gaps and last is not None and begin > last:
            segments.append(("free", begin - last))
        segments.append((kinds[kind], end - begin))
        last = end
    n = n_cores if cores else None
    threads_s = schedule([segments] * n_workers, n_cores=n).end_s
    alone = segments if shared_gil else [("free", s) for _, s in segments]
    processes_s = schedule([alone] * n_workers, n_cores=n).end_s + (start_s if start else 0)
    return {"threads_s": threads_s, "processes_s": processes_s,
            "faster": "threads" if threads_s <= processes_s else "processes"}


WRONG_RACE: list[tuple[dict[str, Any], str]] = [
    ({"shared_gil": True}, "its own GIL"), ({"start": False}, "costs start_s"),
    ({"cores": False}, "pass n_cores"), ({"swap": True}, "swapped"),
    ({"gaps": True}, "gaps between intervals"),
]


def test_4_4_right_answer_passes(capsys: pytest.CaptureFixture[str]) -> None:
    check("4.4", threads_or_processes)
    assert capsys.readouterr().out == "PASS 4.4 (4/4)\n"


@pytest.mark.parametrize(("slip", "hint"), WRONG_RACE, ids=[h for _, h in WRONG_RACE])
def test_4_4_wrong_answers_are_caught(slip: dict[str, Any], hint: str) -> None:
    result = run_check("4.4", lambda *args: threads_or_processes(*args, **slip))
    assert not result.ok
    assert hint in (result.message or ""), result.message


def test_4_4_wrong_winner_alone_is_caught() -> None:
    def flipped(*args: Any) -> dict[str, Any]:
        got = threads_or_processes(*args)
        got["faster"] = "processes" if got["faster"] == "threads" else "threads"
        return got

    assert not run_check("4.4", flipped).ok


def test_4_4_cases_have_both_winners() -> None:
    from dpsim.course.grading import get_exercise

    winners = {c.expected["faster"] for c in get_exercise("4.4").cases()}
    assert winners == {"threads", "processes"}


def test_4_4_stub_is_reported_as_not_done() -> None:
    def threads_or_processes(*args: Any) -> Any:
        raise NotImplementedError("Exercise 4.4: write your code here")

    assert "not done yet" in (run_check("4.4", threads_or_processes).message or "")
