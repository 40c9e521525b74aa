"""Comparing a plain answer with the expected value, and the hint when they differ.

Runs in the grader's process on plain data only (`plain.decode` made the answer), and is
total: any JSON-like answer (a 400-digit int, NaN, inf, deep nesting, the wrong type)
compares as not the same and gets a hint; nothing here raises for what a learner returns.
Floats: an expected float (not int) is matched within `FLOAT32_REL_TOL` at least, so an
answer computed in float32 (a tensor's rounding) is not a wrong answer; an exercise whose
answer sums many float32 terms states a wider tolerance (`summed_rel_tol`); integers stay
exact. Hints name the kind of mistake, or say "too large"/"too small"; never the expected
value. `first_difference` names where a structured answer first differs (a field, an index).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

FLOAT32_UNIT_ROUNDOFF = 2.0 ** -24  # 6e-8: float32's relative rounding step
FLOAT32_REL_TOL = 1e-6  # a few float32 roundings (about 16 units of roundoff)
MAX_DEPTH = 64  # nesting compared; deeper answers are not the same (plain.decode stops at 42)


def summed_rel_tol(n_terms: int) -> float:
    """Relative tolerance of a float32 quantity summed from `n_terms` terms in any order.

    A sum's rounding error grows with the number of terms (at most n roundings); a few
    float32 roundings per term on top of `FLOAT32_REL_TOL`, not one unit of roundoff.
    """
    return FLOAT32_REL_TOL + 4 * max(n_terms, 1) * FLOAT32_UNIT_ROUNDOFF


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
    kind = type(value)
    if kind is int or kind is float:  # the usual case, without the abstract-class check
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_float(value: Any) -> float:
    """`value` as a float; ints too large for one become +-inf (never OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


def same(answer: Any, expected: Any, rel_tol: float = 0.0, abs_tol: float = 0.0) -> bool:
    """True if `answer` equals `expected` (floats within the tolerances, at least float32's
    rounding; sequences and dicts elementwise). False, never an error, for any answer."""
    try:
        return _same(plain_value(answer), plain_value(expected), rel_tol, abs_tol, 0)
    except (RecursionError, OverflowError, ValueError, TypeError, ArithmeticError):
        return False


def _same(answer: Any, expected: Any, rel_tol: float, abs_tol: float, depth: int) -> bool:
    if depth > MAX_DEPTH:
        return False
    if is_number(expected):
        if not is_number(answer):
            return False
        if (isinstance(expected, numbers.Integral) and isinstance(answer, numbers.Integral)
                and not (rel_tol or abs_tol)):
            return int(answer) == int(expected)  # exact, however large
        if isinstance(expected, float):
            rel_tol = max(rel_tol, FLOAT32_REL_TOL)
        a, e = as_float(answer), as_float(expected)
        if not (math.isfinite(a) and math.isfinite(e)):
            return a == e  # inf matches only the same inf; NaN matches nothing
        if rel_tol or abs_tol:
            return math.isclose(a, e, rel_tol=rel_tol, abs_tol=abs_tol)
        return a == e
    if isinstance(expected, (list, tuple)):
        if (not (rel_tol or abs_tol) and type(answer) is list and len(answer) == len(expected)
                and all(type(e) is int for e in expected)
                and all(type(a) is int for a in answer)):
            return answer == list(expected)  # ints, exact: one comparison in C
        return (isinstance(answer, (list, tuple)) and len(answer) == len(expected)
                and all(_same(a, e, rel_tol, abs_tol, depth + 1)
                        for a, e in zip(answer, expected, strict=True)))
    if isinstance(expected, dict):
        return (isinstance(answer, dict) and answer.keys() == expected.keys()
                and all(_same(answer[k], expected[k], rel_tol, abs_tol, depth + 1)
                        for k in expected))
    return isinstance(answer, (str, bool, int, float, type(None))) and bool(answer == expected)


def first_difference(answer: Any, expected: Any, rel_tol: float = 0.0, abs_tol: float = 0.0
                     ) -> str | None:
    """Where a structured answer first differs from the expected one, as
    `field 'grads'[2]: yours is 0.5` (the learner's value only: the expected one is never
    shown); None for a bare number or when the difference is in the answer's shape."""
    try:
        path = _first_path(plain_value(answer), plain_value(expected), rel_tol, abs_tol, 0)
    except (RecursionError, OverflowError, ValueError, TypeError, ArithmeticError):
        return None
    if not path:
        return None
    value = answer
    try:
        for step in path:
            value = value[step]
    except (LookupError, TypeError):
        return None
    where = "".join(f"[{step!r}]" for step in path)
    return f"first difference at {where}: yours is {preview(value, 120)}"


def _first_path(answer: Any, expected: Any, rel_tol: float, abs_tol: float, depth: int
                ) -> list[Any] | None:
    """Keys/indices to the first differing leaf ([] when the whole value differs)."""
    if depth > MAX_DEPTH or _same(answer, expected, rel_tol, abs_tol, depth):
        return None
    if isinstance(expected, dict) and isinstance(answer, dict) \
            and answer.keys() == expected.keys():
        for key in expected:
            sub = _first_path(answer[key], expected[key], rel_tol, abs_tol, depth + 1)
            if sub is not None:
                return [key, *sub]
    if isinstance(expected, (list, tuple)) and isinstance(answer, (list, tuple)) \
            and len(answer) == len(expected):
        for index, (a, e) in enumerate(zip(answer, expected, strict=True)):
            sub = _first_path(a, e, rel_tol, abs_tol, depth + 1)
            if sub is not None:
                return [index, *sub]
    return []


def preview(value: Any, limit: int = 300) -> str:
    """`repr(value)` cut at `limit` characters (never raises: a 5000-digit int included)."""
    try:
        shown = repr(value)
    except (ValueError, RecursionError):
        shown = f"<a {type(value).__name__} too large to show>"
    return shown if len(shown) <= limit else shown[:limit] + " ..."


def shape_problem(answer: Any, expected: Any) -> str | None:
    """What is wrong with the kind of answer, before comparing values (None if nothing)."""
    answer, expected = plain_value(answer), plain_value(expected)
    if answer is None and expected is not None:
        return "your function returned None: did you forget `return`?"
    if is_number(expected):
        if not is_number(answer):
            return f"your function returned a {type(answer).__name__}; the answer is a number"
        value = as_float(answer)
        if math.isnan(value):
            return "your answer is NaN (not a number): look for 0/0 or inf - inf"
        if math.isinf(value) and math.isfinite(as_float(expected)):
            return "your answer is infinite (or too large for a float)"
        if (isinstance(expected, numbers.Integral) and not isinstance(answer, numbers.Integral)
                and value != math.floor(value)):
            return (f"your answer {answer!r} is not a whole number; round it the way the "
                    "question asks (// divides and rounds down)")
    if isinstance(expected, (list, tuple)):
        if not isinstance(answer, (list, tuple)):
            return f"your function returned a {type(answer).__name__}; the answer is a list"
        if len(answer) != len(expected):
            return f"your list has {len(answer)} entries; it needs {len(expected)}"
    if isinstance(expected, dict) and not isinstance(answer, dict):
        return f"your function returned a {type(answer).__name__}; the answer is a dict"
    return None


def direction(answer: Any, expected: Any) -> str:
    """'too large' / 'too small' for numbers; nothing that gives the answer away."""
    answer, expected = plain_value(answer), plain_value(expected)
    if not (is_number(answer) and is_number(expected)):
        return "your answer is not the right one for this input"
    return ("your answer is too large" if as_float(answer) > as_float(expected)
            else "your answer is too small")


def hint(answer: Any, expected: Any, mistakes: dict[str, Any], rel_tol: float,
         abs_tol: float) -> str:
    """The hint for a wrong answer: a known mistake it matches (before its shape: a list
    that kept the padding is named, not counted), its shape, or its direction.
    Never raises, whatever the answer."""
    try:
        hints = [words for words, wrong in mistakes.items()
                 if wrong is not None and not same(wrong, expected, rel_tol, abs_tol)
                 and same(answer, wrong, rel_tol, abs_tol)]
        if len(hints) == 1:
            return f"looks like {hints[0]}"
        if hints:
            return "looks like one of these:" + "".join(f"\n    - {h}" for h in hints)
        return shape_problem(answer, expected) or direction(answer, expected)
    except (RecursionError, OverflowError, ValueError, TypeError, ArithmeticError):
        return "your answer is not the right one for this input"
