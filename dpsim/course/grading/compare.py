"""Comparing a plain answer with the expected value, and the hint when they differ.

Runs in the grader's process on plain data only (`plain.decode` made the answer).
Floats: an expected float (not int) is matched within `FLOAT32_REL_TOL` at least, so an
answer computed in float32 (a tensor's rounding) is not a wrong answer; integers stay exact.
Hints name the kind of mistake, or say "too large"/"too small"; never the expected value.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

FLOAT32_REL_TOL = 1e-6  # float32 has 24 bits of mantissa (6e-8) and a few roundings


def plain_value(value: Any) -> Any:
    """Tensors and numpy values as python numbers / nested lists (expected values)."""
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        return value.tolist()
    if isinstance(value, tuple):
        return [plain_value(v) for v in value]
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_value(v) for k, v in value.items()}
    return value


def is_number(value: Any) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def same(answer: Any, expected: Any, rel_tol: float = 0.0, abs_tol: float = 0.0) -> bool:
    """True if `answer` equals `expected` (floats within the tolerances, at least float32's
    rounding; sequences and dicts elementwise)."""
    answer, expected = plain_value(answer), plain_value(expected)
    if is_number(expected):
        if not is_number(answer):
            return False
        if isinstance(expected, float):
            rel_tol = max(rel_tol, FLOAT32_REL_TOL)
        if rel_tol or abs_tol:
            return math.isclose(float(answer), float(expected), rel_tol=rel_tol,
                                abs_tol=abs_tol)
        return bool(answer == expected)
    if isinstance(expected, (list, tuple)):
        return (isinstance(answer, (list, tuple)) and len(answer) == len(expected)
                and all(same(a, e, rel_tol, abs_tol)
                        for a, e in zip(answer, expected, strict=True)))
    if isinstance(expected, dict):
        return (isinstance(answer, dict) and answer.keys() == expected.keys()
                and all(same(answer[k], expected[k], rel_tol, abs_tol) for k in expected))
    return bool(answer == expected)


def shape_problem(answer: Any, expected: Any) -> str | None:
    """What is wrong with the kind of answer, before comparing values (None if nothing)."""
    answer, expected = plain_value(answer), plain_value(expected)
    if answer is None:
        return "your function returned None: did you forget `return`?"
    if is_number(expected):
        if not is_number(answer):
            return f"your function returned a {type(answer).__name__}; the answer is a number"
        if (isinstance(expected, numbers.Integral) and math.isfinite(float(answer))
                and float(answer) != math.floor(float(answer))):
            return (f"your answer {answer!r} is not a whole number; round it the way the "
                    "question asks (// divides and rounds down)")
    if isinstance(expected, (list, tuple)):
        if not isinstance(answer, (list, tuple)):
            return f"your function returned a {type(answer).__name__}; the answer is a list"
        if len(answer) != len(expected):
            return f"your list has {len(answer)} entries; it needs {len(expected)}"
    return None


def direction(answer: Any, expected: Any) -> str:
    """'too large' / 'too small' for numbers; nothing that gives the answer away."""
    answer, expected = plain_value(answer), plain_value(expected)
    if not (is_number(answer) and is_number(expected)):
        return "your answer is not the right one for this input"
    return ("your answer is too large" if float(answer) > float(expected)
            else "your answer is too small")


def hint(answer: Any, expected: Any, mistakes: dict[str, Any], rel_tol: float,
         abs_tol: float) -> str:
    """The hint for a wrong answer: its shape, a known mistake it matches, or its direction."""
    problem = shape_problem(answer, expected)
    if problem:
        return problem
    hints = [words for words, wrong in mistakes.items()
             if wrong is not None and not same(wrong, expected, rel_tol, abs_tol)
             and same(answer, wrong, rel_tol, abs_tol)]
    if len(hints) == 1:
        return f"looks like {hints[0]}"
    if hints:
        return "looks like one of these:" + "".join(f"\n    - {h}" for h in hints)
    return direction(answer, expected)
