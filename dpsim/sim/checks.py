"""Input checks that raise a ValueError naming the field, its value and what is allowed.

The simulator's bounds live here too, so that every module refuses the same sizes:
`MAX_COUNT` for counts a caller gives (elements, bytes, tensors, samples), `MAX_TOTAL_BYTES`
for byte totals the simulator derives from them (a trace's samples, a memory breakdown),
and `MAX_SECONDS` for times in a trace. Within them every result stays a finite number.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from numbers import Real
from typing import TypeVar

T = TypeVar("T")

MAX_COUNT = 2**62  # a count a caller gives: it fits a signed 64-bit integer, with headroom
MAX_TOTAL_BYTES = 2**128  # a derived byte total: a count times a batch, times a few factors
MAX_SECONDS = 1e100  # a time in a trace: far beyond any step, and sums of them stay finite


def require_range(
    field: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_inclusive: bool = True,
) -> float:
    """Return `value` if low <= value <= high (or low < value), else raise ValueError."""
    if type(value) in _PLAIN and value == value and _within(value, low, high, low_inclusive):
        return value  # the common case, without building a message
    if isinstance(value, bool) or not isinstance(value, Real):  # numpy numbers are Real
        raise ValueError(f"{field}={value!r} is not a number; "
                         f"give a number{_bounds(low, high, low_inclusive)}")
    if value != value:  # NaN
        raise ValueError(f"{field}=nan is not allowed; "
                         f"give a number{_bounds(low, high, low_inclusive)}")
    too_low = low is not None and (value < low if low_inclusive else value <= low)
    too_high = high is not None and value > high
    if too_low or too_high:
        raise ValueError(f"{field}={value!r} is out of range; "
                         f"allowed{_bounds(low, high, low_inclusive)}")
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
    if type(value) in _PLAIN and -_INF < value < _INF and _within(value, low, high,
                                                                  low_inclusive):
        return value  # the common case
    if not isinstance(value, bool) and isinstance(value, Real) and value in (_INF, -_INF):
        allowed = _bounds(low, high, low_inclusive)
        raise ValueError(f"{field}={value!r} is not finite; give a finite number{allowed}")
    return require_range(field, value, low, high, low_inclusive=low_inclusive)


def require_int(field: str, value: int, low: int | None = None, high: int | None = None) -> int:
    """Return `value` if it is an integer in [low, high], else raise ValueError."""
    if type(value) is int and _within(value, low, high, True):
        return value  # the common case
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
    if type(value) is str and isinstance(allowed, (tuple, dict, frozenset)) and value in allowed:
        return value  # the common case
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


def require_type(field: str, value: T, kind: type | tuple[type, ...]) -> T:
    """Return `value` if it is an instance of `kind` (a str, a Layer, ...), else raise.

    For numbers use require_int or require_finite: they refuse bools, NaN and inf.
    """
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        names = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"{field}={reprlib.repr(value)} is not a {names}; give a {names}")
    return value


@contextmanager
def within(container: str) -> Iterator[None]:
    """Name a ValueError raised in the block inside `container`: `events[3].start_s=...`."""
    try:
        yield
    except ValueError as err:
        raise ValueError(f"{container}.{err}") from None


_PLAIN = (int, float)  # exact types (not bool, not a subclass) that take the fast path
_INF = float("inf")


def _within(value: float, low: float | None, high: float | None, low_inclusive: bool) -> bool:
    if low is not None and (value < low if low_inclusive else value <= low):
        return False
    return high is None or value <= high


def _bounds(low: float | None, high: float | None, low_inclusive: bool) -> str:
    lo_op = ">=" if low_inclusive else ">"
    if low is not None and high is not None:
        return f" {lo_op} {low} and <= {high}"
    if low is not None:
        return f" {lo_op} {low}"
    if high is not None:
        return f" <= {high}"
    return ""
