"""The exercise registry and check(): messages, stubs, errors, determinism, every exercise."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest
import torch

from dpsim.course.grading import (
    Case,
    CheckResult,
    ExerciseFailed,
    all_exercises,
    chapter_exercises,
    check,
    exercise,
    get_exercise,
    registry,
    run_check,
)
from dpsim.course.grading.compare import is_number, plain_value
from dpsim.course.grading.registry import chapter_modules


def _add_cases(rng: random.Random) -> Iterator[Case]:
    for _ in range(3):
        a, b = 8 * rng.randint(13, 124), 8 * rng.randint(13, 124)
        yield Case(f"add({a}, {b})", args=(a, b), expected=a + b,
                   mistakes={"you subtracted": a - b})


@pytest.fixture
def toy() -> Iterator[str]:
    """A throwaway exercise 99.1: add two numbers."""
    exercise("99.1", function="add", title="Add two numbers")(_add_cases)
    yield "99.1"
    registry._REGISTRY.pop("99.1", None)


def answer_hidden(result: CheckResult) -> bool:
    """True if the failed case's expected value is nowhere in the message (label aside)."""
    assert result.message is not None
    body = result.message.replace(result.failed_label or "", "")
    body = re.sub(r"\(\d+ of \d+ cases passed\)", "", body)
    expected = plain_value(result.expected)
    if not is_number(expected):
        return str(expected) not in body
    return re.search(rf"(?<![\w.]){re.escape(str(expected))}(?![\w.])", body) is None


def test_pass_prints_exactly_one_line(toy: str, capsys: pytest.CaptureFixture[str]) -> None:
    check(toy, lambda a, b: a + b)
    assert capsys.readouterr().out == "PASS 99.1 (3/3)\n"


def test_wrong_answer_names_the_input_and_hides_the_answer(toy: str) -> None:
    with pytest.raises(ExerciseFailed) as info:
        check(toy, lambda a, b: a + b + 1)
    message = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert "case 1 of 3" in message
    assert "input: add(" in message
    assert "your answer is too large" in message
    assert "(0 of 3 cases passed)" in message
    assert answer_hidden(run_check(toy, lambda a, b: a + b + 1))


def test_known_mistake_gets_its_hint(toy: str) -> None:
    result = run_check(toy, lambda a, b: a - b)
    assert not result.ok
    assert "looks like you subtracted" in (result.message or "")
    assert answer_hidden(result)


def test_factor_and_shape_hints(toy: str) -> None:
    large = run_check(toy, lambda a, b: 8 * (a + b)).message or ""
    assert "your answer is too large" in large
    assert "8x" not in large  # no factor: it would give the answer away
    assert "your answer is too small" in (run_check(toy, lambda a, b: (a + b) / 4).message or "")
    assert "forget `return`" in (run_check(toy, lambda a, b: None).message or "")
    assert "returned a str" in (run_check(toy, lambda a, b: "7").message or "")
    assert "not a whole number" in (run_check(toy, lambda a, b: a + b + 0.5).message or "")


def test_numbers_from_numpy_and_tensors_count(toy: str, capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    check(toy, lambda a, b: np.int64(a + b))
    check(toy, lambda a, b: torch.tensor(a + b))
    check(toy, lambda a, b: float(a + b))
    assert capsys.readouterr().out.count("PASS 99.1 (3/3)") == 3


def test_stub_is_reported_as_not_done(toy: str) -> None:
    def add(a: int, b: int) -> int:
        raise NotImplementedError("Exercise 99.1: write your code here")

    with pytest.raises(ExerciseFailed, match=r"Exercise 99.1 is not done yet: replace the "
                                             r"`raise NotImplementedError` line in `add`"):
        check(toy, add)


def test_exception_in_learner_code_names_case_and_line(toy: str) -> None:
    def add(a: int, b: int) -> int:
        return a // (b - b)

    message = run_check(toy, add).message or ""
    assert "case 1 of 3" in message
    assert "ZeroDivisionError" in message
    assert "return a // (b - b)" in message


def test_partial_pass_is_counted_but_fails(toy: str) -> None:
    seen: list[int] = []

    def add(a: int, b: int) -> int:
        seen.append(a)
        return a + b if len(seen) != 2 else 0

    result = run_check(toy, add)
    assert (result.passed, result.total, result.ok) == (2, 3, False)
    assert "case 2 of 3" in (result.message or "")
    assert "(2 of 3 cases passed)" in (result.message or "")


def test_not_callable_and_unknown_id(toy: str) -> None:
    with pytest.raises(ExerciseFailed, match="needs your function `add`"):
        check(toy, 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"exercise_id='0.9' is not known; allowed: .*'99.1'"):
        check("0.9", lambda: 0)


def test_decorator_validates_and_refuses_duplicates(toy: str) -> None:
    with pytest.raises(ValueError, match=r"not of the form 'N.M'"):
        exercise("1-1", function="f", title="t")
    with pytest.raises(ValueError, match="not a Python identifier"):
        exercise("99.2", function="not a name", title="t")
    with pytest.raises(ValueError, match="points=0"):
        exercise("99.2", function="f", title="t", points=0)

    def other(rng: random.Random) -> Iterator[Case]:
        yield Case("x")

    other.__module__ = "somewhere.else"
    with pytest.raises(ValueError, match="registered twice"):
        exercise("99.1", function="add", title="again")(other)


def test_check_leaves_the_callers_torch_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    run_check("1.2", lambda batch_size, widths: 0)
    assert torch.equal(torch.rand(3), expected)


# --- every registered exercise, whatever chapter it comes from -------------------------

EXERCISES = all_exercises()
IDS = [ex.exercise_id for ex in EXERCISES]
# Exercises whose cases call the learner's function some other way (on real ranks) start
# processes: slow.
ON_RANKS = [pytest.param(ex.exercise_id,
                         marks=[pytest.mark.slow] if any(c.call for c in ex.cases()) else [])
            for ex in EXERCISES]


def test_registry_discovers_the_chapter_modules() -> None:
    assert {"1.1", "1.2", "1.3"} <= set(IDS)
    assert [ex.exercise_id for ex in chapter_exercises(1)][:3] == ["1.1", "1.2", "1.3"]
    assert len({ex.function for ex in EXERCISES}) == len(EXERCISES), "function names repeat"
    assert sorted(IDS, key=lambda i: tuple(map(int, i.split(".")))) == IDS


def test_every_module_of_a_chapter_is_found_by_its_name() -> None:
    """chNN and chNN_<topic> modules are chapter NN's: none needs another to import it."""
    package = "dpsim.course.exercises"
    assert chapter_modules(5) == [f"{package}.ch05", f"{package}.ch05_buckets",
                                  f"{package}.ch05_train"]
    assert f"{package}.ch01_autocast_checkpoint" in chapter_modules(1)
    assert f"{package}.ch03_dp_forward" in chapter_modules(3)
    assert not any(m.startswith(f"{package}.ch1") for m in chapter_modules(1))
    assert {"1.4", "1.5", "3.5", "5.4", "5.5", "6.5", "6.6"} <= set(IDS)


@pytest.mark.parametrize("exercise_id", IDS)
def test_cases_are_seeded_and_several(exercise_id: str) -> None:
    ex = get_exercise(exercise_id)
    first, second = ex.cases(), ex.cases()
    assert len(first) >= 2
    assert [c.label for c in first] == [c.label for c in second]
    assert all(c.label for c in first)


@pytest.mark.parametrize("exercise_id", ON_RANKS)
@pytest.mark.parametrize("constant", [0, None])
def test_constant_answers_are_caught(exercise_id: str, constant: object) -> None:
    result = run_check(exercise_id, lambda *args, **kwargs: constant)
    assert not result.ok, f"{exercise_id} accepts a function that always returns {constant!r}"
    assert result.message
    assert f"Exercise {exercise_id}" in result.message
    assert answer_hidden(result)


@pytest.mark.parametrize("exercise_id", ON_RANKS)
def test_stubs_and_crashes_are_reported(exercise_id: str) -> None:
    ex = get_exercise(exercise_id)

    def stub(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(f"Exercise {exercise_id}: write your code here")

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    assert f"Exercise {exercise_id} is not done yet" in (run_check(exercise_id, stub).message
                                                         or "")
    message = run_check(exercise_id, crash).message or ""
    assert "RuntimeError: boom" in message
    assert "case 1 of" in message
    assert f"`{ex.function}`" in (run_check(exercise_id, stub).message or "")


def nested(depth: int) -> object:
    """[[...[1]...]], `depth` lists deep."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


ODD_ANSWERS = [10**400, -10**400, float("nan"), float("inf"), -float("inf"), "7", None, True,
               [], nested(40),
               {"a": 1}, {(1, 2): [1.5]}, [10**400, float("nan")], 1e308, -0.0, 2**63]


@pytest.mark.parametrize("answer", ODD_ANSWERS, ids=repr)
@pytest.mark.parametrize("expected", [3, 2.5, [1, 2.0], {"a": 1.0, "b": [2]}, "x", None],
                         ids=repr)
def test_comparison_is_total(answer: object, expected: object) -> None:
    """Any JSON-like answer is compared, hinted and shown without an error; none is right."""
    from dpsim.course.grading.compare import first_difference, hint, preview, same

    assert same(answer, expected, 1e-6, 0.0) is (answer == expected and answer is not True)
    assert isinstance(hint(answer, expected, {"m": 4}, 0.0, 0.0), str)
    first_difference(answer, expected)
    assert isinstance(preview(answer), str)


@pytest.mark.parametrize("answer", [10**400, float("nan"), float("inf"), 10**5000],
                         ids=["10**400", "nan", "inf", "10**5000"])
def test_odd_numbers_score_zero_with_a_message(toy: str, answer: object) -> None:
    """Was an OverflowError in the grader (float(10**400) in the comparison)."""
    result = run_check(toy, lambda a, b: answer)
    assert result.passed == 0
    assert result.message is not None
    assert "hint:" in result.message or "raised" in result.message


def test_first_difference_names_the_field(toy: str) -> None:
    from dpsim.course.grading.compare import first_difference

    where = first_difference({"a": [1, 2], "b": 3.0}, {"a": [1, 5], "b": 3.0})
    assert where == "first difference at ['a'][1]: yours is 2"
    assert first_difference(4, 5) is None  # a bare number: the answer line says it all


def test_float32_sums_get_a_tolerance_that_grows_with_terms() -> None:
    from dpsim.course.grading.compare import FLOAT32_REL_TOL, same, summed_rel_tol

    assert summed_rel_tol(1) > FLOAT32_REL_TOL
    assert summed_rel_tol(60) > summed_rel_tol(1)
    assert same(1.0 * (1 + 2e-7), 1.0)  # a float32 rounding away: not a wrong answer
    assert not same(1.0 * (1 + 1e-4), 1.0, summed_rel_tol(60))


def test_a_hung_launch_reports_before_the_check_is_stopped() -> None:
    """The ranks' launch limit ends, with room for launch's own report (where each rank
    was), before the check's limit: before, 180 s against 120 s, the check was killed first."""
    from dpsim.course.grading import core, ranks

    assert ranks.TIMEOUT_S + 20 <= core.CHECK_TIMEOUT_S
    assert core.CHECK_TIMEOUT_S - ranks.TIMEOUT_S == core.REPORT_ROOM_S
