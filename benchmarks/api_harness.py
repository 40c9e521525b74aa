"""Calling the public API safely and judging what comes back (the fuzz and the property test).

* `call_bounded(fn, seconds)`: run `fn()` in the main thread under a SIGALRM time bound
  (`signal.setitimer`) and a memory cap; the result, the exception, or a hang, and the
  seconds it took.
* `memory_cap(extra_bytes)`: lower RLIMIT_AS to what the process maps now plus `extra_bytes`,
  so that an input asking for a huge allocation raises MemoryError instead of exhausting a
  shared machine; restored on exit.
* `bad_numbers(result)`: every NaN, inf or negative number anywhere in a result (dataclass
  fields and properties, tuples, lists, dicts, numpy arrays, a Trace's events), by path.
* `names_field(message, name)`: the ValueError message names `name` as `name=`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import re
import resource
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# Documented sentinels that are not garbage: (last path component, value, why).
SENTINELS: tuple[tuple[str, float, str], ...] = (
    ("imbalance", math.inf, "DPSummary.imbalance: inf when no other device got a chunk"),
)
MAX_VISITS = 200_000  # nodes one walk looks at (a Trace of a huge simulation stays cheap)
MAX_FINDINGS = 5  # bad numbers reported per result
REPEAT_S = 0.05  # the alarm repeats this often until the call returns
MEMORY_BYTES = 2 * 2**30  # address space one call may add (a huge request fails instead)
_TEXT_BAD = re.compile(r"(?<![A-Za-z])(nan|inf)(?![A-Za-z])|(?<![\w.\-])-\d", re.IGNORECASE)


class CallTimeout(BaseException):
    """Raised by SIGALRM inside a call that ran past its time bound.

    A BaseException, so that code under test catching `Exception` cannot swallow it.
    """


@dataclass(frozen=True)
class Outcome:
    """What one bounded call did: "returned", "raised" or "hang" (seconds of wall time)."""

    status: str
    result: Any = None
    error: BaseException | None = None
    elapsed_s: float = 0.0


def call_bounded(fn: Callable[[], Any], seconds: float = 1.0,
                 extra_memory: int | None = MEMORY_BYTES) -> Outcome:
    """Run `fn()` in the main thread; a hang when it does not return within `seconds`.

    With `extra_memory`, the call may map at most that many more bytes (`memory_cap`).
    Exceptions are kept without their tracebacks, so that the frames of a failed call (and
    whatever huge objects they held) are freed at once.
    """

    armed = [True]

    def on_alarm(_signum: int, _frame: object) -> None:
        if armed[0]:
            raise CallTimeout(f"no return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    cap = memory_cap(extra_memory) if extra_memory is not None else contextlib.nullcontext()
    start = time.perf_counter()
    outcome: Outcome
    collecting = gc.isenabled()
    gc.disable()  # no gc callbacks (which cannot raise) run inside the call
    try:
        with cap:
            # the alarm repeats until disarmed: a CallTimeout swallowed where it was raised
            # (a __del__, a bare `except:` in the code under test) comes back
            signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_S)
            try:
                result = fn()
            finally:
                armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        outcome = Outcome("returned", result=result)
    except CallTimeout as err:
        outcome = Outcome("hang", error=_detached(err))
    except Exception as err:  # every other exception is an outcome to classify
        outcome = Outcome("raised", error=_detached(err))
    finally:
        signal.signal(signal.SIGALRM, previous)
        if collecting:
            gc.enable()
    elapsed = time.perf_counter() - start
    if outcome.status != "hang" and elapsed > seconds:  # a long C call the alarm could not cut
        outcome = Outcome("hang", error=CallTimeout(f"returned after {elapsed:.2f} s"))
    return dataclasses.replace(outcome, elapsed_s=elapsed)


def _detached(err: BaseException) -> BaseException:
    """`err` (and the exceptions it chains) without tracebacks."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return err


def _mapped_bytes() -> int | None:
    """Virtual memory this process maps now (Linux /proc), or None elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@contextlib.contextmanager
def memory_cap(extra_bytes: int = MEMORY_BYTES) -> Iterator[None]:
    """Allow at most `extra_bytes` more address space while inside (no-op where unknown)."""
    mapped = _mapped_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = None if mapped is None else mapped + extra_bytes
    if cap is not None and hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if cap is not None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        if cap is not None:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def names_field(message: str, name: str) -> bool:
    """True when `message` names `name` as `name=`, an element as `name[`, or a part as
    `name (elements)=` (anywhere)."""
    return re.search(rf"(?<![A-Za-z0-9_.]){re.escape(name)}(?: \([^)]*\))?[=\[]",
                     message) is not None


def _sentinel(path: str, value: float) -> bool:
    last = re.split(r"[.\[\]']+", path.rstrip("]'"))[-1]
    return any(last == name and value == v for name, v, _ in SENTINELS)


def _number(path: str, value: float, out: list[str]) -> None:
    if value != value:
        out.append(f"{path} = nan")
    elif value in (math.inf, -math.inf):
        if not _sentinel(path, value):
            out.append(f"{path} = {value}")
    elif value < 0:
        out.append(f"{path} = {value!r}")


def _array(path: str, arr: np.ndarray, out: list[str]) -> None:
    if arr.dtype.kind in "iuf":
        bad = ~np.isfinite(arr) | (arr < 0) if arr.dtype.kind == "f" else arr < 0
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            out.append(f"{path}{list(index)} = {arr[index]!r}")
    elif arr.dtype.kind == "O":
        for i, item in enumerate(arr.ravel().tolist()):
            if isinstance(item, int | float) and not isinstance(item, bool):
                _number(f"{path}[{i}]", item, out)


def _properties(obj: Any) -> Iterator[tuple[str, Any]]:
    """Public properties of a dpsim object; a property that raises is reported as such."""
    for klass in type(obj).__mro__:
        if not klass.__module__.startswith("dpsim"):
            continue
        for name, member in vars(klass).items():
            if isinstance(member, property) and not name.startswith("_"):
                try:
                    yield name, getattr(obj, name)
                except Exception as err:  # a result that blows up when read is garbage
                    yield name, _Raised(err)


@dataclass(frozen=True)
class _Raised:
    error: Exception


def bad_numbers(result: Any, *, skip: frozenset[str] = frozenset(), text: bool = False,
                limit: int = MAX_FINDINGS) -> list[str]:
    """NaN, inf and negative numbers in `result`, as "path = value" (at most `limit`).

    Walks dataclass fields and public properties, dicts (keys and values), sequences, sets,
    numpy arrays and scalars; `skip` names fields or keys holding the caller's own data
    (not checked); `text=True` also flags nan, inf and negative numbers written in strings.
    Plotly figures and other foreign objects are not entered. Booleans are not numbers.
    """
    out: list[str] = []
    seen: set[int] = set()
    visits = 0
    stack: list[tuple[str, Any]] = [("result", result)]
    while stack and len(out) < limit and visits < MAX_VISITS:
        path, obj = stack.pop()
        visits += 1
        if isinstance(obj, np.generic):  # a numpy scalar: its Python value
            obj = obj.item()
        if isinstance(obj, bool) or obj is None:
            continue
        if isinstance(obj, int | float):
            _number(path, obj, out)
        elif isinstance(obj, str):
            match = _TEXT_BAD.search(obj) if text else None
            if match:
                out.append(f"{path} = {obj[:120]!r}")
        elif isinstance(obj, _Raised):
            out.append(f"{path} raised {type(obj.error).__name__}: {obj.error}")
        elif isinstance(obj, np.ndarray):
            _array(path, obj, out)
        elif id(obj) in seen:
            continue
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            seen.add(id(obj))
            fields = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
            stack.extend((f"{path}.{k}", v) for k, v in [*fields, *_properties(obj)]
                         if k not in skip)
        elif isinstance(obj, Mapping):
            seen.add(id(obj))
            for k, v in obj.items():
                if k not in skip:
                    stack.append((f"{path}[{k!r}]", v))
                    if isinstance(k, int | float) and not isinstance(k, bool):
                        stack.append((f"{path}.keys()", k))
        elif isinstance(obj, list | tuple | set | frozenset):
            seen.add(id(obj))
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(obj))
        elif type(obj).__module__.startswith("dpsim") and hasattr(obj, "__dict__"):
            seen.add(id(obj))
            stack.extend((f"{path}.{k}", v) for k, v in vars(obj).items()
                         if not k.startswith("_") and k not in skip)
    return out
