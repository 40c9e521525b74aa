"""Input checks that raise a ValueError naming the field, its value and what is allowed.

Two ways in. The `require_*` functions check one value. The specs (`Int`, `Real`, `OneOf`,
`Flag`, `Instance`, `Each`) say the same thing as data, in a type hint:
`world_size: Annotated[int, Int(1, MAX_WORLD_SIZE)]` (the named hints are in `sim/limits.py`).
`checked(fn)` checks a call's arguments against `fn`'s hints; the simulator's face
(`dpsim.sim`) wraps what it exports with it, so inner code calls the bare function and
trusts its typed inputs. `check_fields(obj)` checks a dataclass's fields against theirs
(a config's `__post_init__`). A plain hint checks the kind: `int`, `float` (finite), `bool`,
a class (isinstance), `X | None`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import reprlib
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Real as _Number
from typing import Annotated, Any, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


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
    if isinstance(value, bool) or not isinstance(value, _Number):  # numpy numbers are Real
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
    if not isinstance(value, bool) and isinstance(value, _Number) and value in (_INF, -_INF):
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


# --- checks as data: specs in type hints ---------------------------------------------------

class Spec:
    """What a value may be; calling it returns the value or raises a ValueError naming it."""

    def __call__(self, field: str, value: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Spec):
    """An integer (not a bool) in [low, high]."""

    low: int | None = None
    high: int | None = None

    def __call__(self, field: str, value: Any) -> int:
        return require_int(field, value, self.low, self.high)


@dataclass(frozen=True)
class Real(Spec):
    """A number (not a bool, not NaN) in [low, high] (or (low, high]); finite unless told."""

    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    finite: bool = True

    def __call__(self, field: str, value: Any) -> float:
        check = require_finite if self.finite else require_range
        return check(field, value, self.low, self.high, low_inclusive=self.low_inclusive)


@dataclass(frozen=True)
class OneOf(Spec):
    """One of `allowed`: a tuple, or a function returning the choices (a registry's names)."""

    allowed: tuple[Any, ...] | Callable[[], Iterable[Any]]

    def __call__(self, field: str, value: Any) -> Any:
        allowed = self.allowed if isinstance(self.allowed, tuple) else tuple(self.allowed())
        return require_choice(field, value, allowed)


@dataclass(frozen=True)
class Flag(Spec):
    """True or False."""

    def __call__(self, field: str, value: Any) -> bool:
        return require_bool(field, value)


@dataclass(frozen=True)
class Instance(Spec):
    """An instance of `kind`."""

    kind: type | tuple[type, ...]

    def __call__(self, field: str, value: Any) -> Any:
        return require_type(field, value, self.kind)


@dataclass(frozen=True)
class Each(Spec):
    """A list or tuple (not a string) of `min_len`..`max_len` items, each checked by `item`
    and named `field[i]`."""

    item: Spec
    min_len: int = 1
    max_len: int = 1 << 20

    def __call__(self, field: str, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{field}={reprlib.repr(value)} is not a list or tuple; allowed: "
                             f"a list or tuple of {self.min_len} to {self.max_len} values")
        if not self.min_len <= len(value) <= self.max_len:
            raise ValueError(f"{field}={reprlib.repr(value)} has {len(value)} values; allowed: "
                             f"{self.min_len} to {self.max_len}")
        for i, item in enumerate(value):
            self.item(f"{field}[{i}]", item)
        return value


@dataclass(frozen=True)
class Maybe(Spec):
    """None, or what `spec` allows."""

    spec: Spec

    def __call__(self, field: str, value: Any) -> Any:
        return value if value is None else self.spec(field, value)


def spec_of(hint: Any) -> Spec | None:
    """The check a type hint asks for (None: nothing to check, e.g. a Callable)."""
    if typing.get_origin(hint) is Annotated:
        found = [m for m in hint.__metadata__ if isinstance(m, Spec)]
        return found[0] if found else spec_of(hint.__origin__)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = spec_of(options[0]) if len(options) == 1 else _classes(options)
        if type(None) not in typing.get_args(hint):
            return inner
        return None if inner is None else Maybe(inner)
    if hint is bool:
        return Flag()
    if hint is int:
        return Int()
    if hint is float:
        return Real()
    if isinstance(hint, type) and hint is not object:
        return Instance(hint)
    return None


def _classes(options: Sequence[Any]) -> Spec | None:
    if all(isinstance(o, type) for o in options):
        return Instance(tuple(options))
    return None


_FIELD_SPECS: dict[type, tuple[tuple[str, Spec], ...]] = {}  # a dataclass -> its fields' specs


def _field_specs(cls: type) -> tuple[tuple[str, Spec], ...]:
    found = _FIELD_SPECS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        found = tuple((f.name, spec) for f in dataclasses.fields(cls)
                      if (spec := spec_of(hints[f.name])) is not None)
        _FIELD_SPECS[cls] = found
    return found


def check_fields(obj: object) -> None:
    """Check each field of the dataclass `obj` against its type hint."""
    for name, spec in _field_specs(type(obj)):
        spec(name, getattr(obj, name))


def checked(fn: F) -> F:
    """`fn`, checking each argument a caller passes against its type hint first.

    Arguments left at their defaults are not checked (the defaults are trusted).
    """
    signature = inspect.signature(fn)
    specs: dict[str, Spec] | None = None

    @functools.wraps(fn)
    def at_the_face(*args: Any, **kwargs: Any) -> Any:
        nonlocal specs
        if specs is None:
            hints = typing.get_type_hints(fn, include_extras=True)
            specs = {name: spec for name in signature.parameters
                     if name in hints and (spec := spec_of(hints[name])) is not None}
        for name, value in signature.bind(*args, **kwargs).arguments.items():
            spec = specs.get(name)
            if spec is not None:
                spec(name, value)
        return fn(*args, **kwargs)

    return typing.cast(F, at_the_face)
