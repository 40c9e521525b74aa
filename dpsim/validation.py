"""Input checks that raise a ValueError naming the field, its value and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def require_range(
    field: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
) -> float:
    """Return `value` if low <= value <= high (or low < value), else raise ValueError."""
    allowed = _bounds(low, high, low_inclusive)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{field}={value!r} is not a number; give a number{allowed}")
    if value != value:  # NaN
        raise ValueError(f"{field}=nan is not allowed; give a number{allowed}")
    too_low = low is not None and (value < low if low_inclusive else value <= low)
    too_high = high is not None and value > high
    if too_low or too_high:
        raise ValueError(f"{field}={value!r} is out of range; allowed{allowed}")
    return value


def require_finite(
    field: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
) -> float:
    """Like `require_range`, and also refuse inf and -inf (a size, time or rate)."""
    require_range(field, value, low, high, low_inclusive=low_inclusive)
    if value in (float("inf"), float("-inf")):
        allowed = _bounds(low, high, low_inclusive)
        raise ValueError(f"{field}={value!r} is not finite; give a finite number{allowed}")
    return value


def require_int(field: str, value: int, low: int | None = None, high: int | None = None) -> int:
    """Return `value` if it is an integer in [low, high], else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
            else:
                raise TypeError
        except TypeError:
            raise ValueError(
                f"{field}={value!r} is not an integer; give an integer{_bounds(low, high, True)}"
            ) from None
    require_range(field, value, low, high)
    return value


def require_choice(field: str, value: T, allowed: Iterable[T]) -> T:
    """Return `value` if it is one of `allowed`, else raise ValueError listing the choices."""
    options = list(allowed)
    if value not in options:
        listed = ", ".join(repr(o) for o in options)
        raise ValueError(f"{field}={value!r} is not known; allowed: {listed}")
    return value


def require_bool(field: str, value: object) -> bool:
    """Return `value` if it is True or False (not 0, 1 or "yes"), else raise ValueError."""
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} is not allowed; allowed: True, False")
    return value


def _bounds(low: float | None, high: float | None, low_inclusive: bool) -> str:
    lo_op = ">=" if low_inclusive else ">"
    if low is not None and high is not None:
        return f" {lo_op} {low} and <= {high}"
    if low is not None:
        return f" {lo_op} {low}"
    if high is not None:
        return f" <= {high}"
    return ""
