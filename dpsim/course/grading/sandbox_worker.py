"""What runs inside the sandbox: the learner's function on the case inputs, answers out.

A request holds the learner's function as dill bytes (unpickled here and nowhere else),
the exercise's `forbidden` names, and for every case only its harness (`Case.call`, a
module-level function pickled by reference), args and kwargs. Each case's outcome is one
JSON line (see `outcome`): the answer as plain data, the error the function raised, or the
forbidden name it called. Expected values never enter this process.
"""

from __future__ import annotations

import contextlib
import importlib
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from dpsim.course.grading.plain import encode, to_plain

STUB_WORDS = "write your code"


class ForbiddenCall(BaseException):
    """Raised by a tripwire: the learner's function called a name the exercise forbids."""


def _tripwire(name: str, tripped: list[str]) -> Callable[..., Any]:
    def tripwire(*args: Any, **kwargs: Any) -> Any:
        tripped.append(name)
        raise ForbiddenCall(name)

    return tripwire


def _restorer(owner: Any, attr: str, value: Any) -> Callable[[], None]:
    return lambda: setattr(owner, attr, value)


@contextlib.contextmanager
def tripwires(forbidden: list[str] | tuple[str, ...]) -> Iterator[list[str]]:
    """Replace each dotted name (module attribute) by a tripwire; restore them on exit.

    The function object itself gets the tripwire's code too (when it has no closure), so a
    reference taken before (`from dpsim.sim.cost.memory import f`, a pickled reference) trips as
    well.
    """
    tripped: list[str] = []
    undo: list[Callable[[], None]] = []
    try:
        for name in forbidden:
            module_name, _, attr = name.rpartition(".")
            module = importlib.import_module(module_name)
            original = getattr(module, attr)
            wire = _tripwire(name, tripped)
            setattr(module, attr, wire)
            undo.append(_restorer(module, attr, original))
            code = getattr(original, "__code__", None)
            if code is not None and not code.co_freevars:
                stub = _coded_tripwire(name)
                original.__code__ = stub
                undo.append(_restorer(original, "__code__", code))
        yield tripped
    finally:
        for step in reversed(undo):
            step()


def _coded_tripwire(name: str) -> Any:
    source = ("def tripwire(*args, **kwargs):\n"
              "    from dpsim.course.grading.sandbox_worker import trip\n"
              f"    trip({name!r})\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<forbidden {name}>", "exec"), namespace)
    return namespace["tripwire"].__code__


_ACTIVE: list[list[str]] = []  # the tripped list of the tripwires now in place


def trip(name: str) -> None:
    """Record that `name` was called and stop the learner's function."""
    if _ACTIVE:
        _ACTIVE[-1].append(name)
    raise ForbiddenCall(name)


def _where(exc: BaseException, fn: Any) -> str:
    """' at line N of your code: ...' for the deepest frame in the learner's own file."""
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if not frames:
        return ""
    frame = frames[-1]
    code = f": {frame.line.strip()}" if frame.line else ""
    return f" at line {frame.lineno} of your code{code}"


def _raised_by_stub(exc: BaseException, fn: Any) -> bool:
    if not isinstance(exc, NotImplementedError):
        return False
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and (frames[-1].filename == filename or STUB_WORDS in str(exc))


def outcome(index: int, fn: Any, call: Callable[..., Any] | None, args: tuple[Any, ...],
            kwargs: dict[str, Any], tripped: list[str]) -> str:
    """Run one case; its outcome as one JSON line (never raises for the learner's code)."""
    del tripped[:]
    try:
        answer = call(fn, *args, **kwargs) if call is not None else fn(*args, **kwargs)
        if tripped:
            return encode({"i": index, "forbidden": tripped[0]})
        return encode({"i": index, "answer": to_plain(answer)})
    except BaseException as exc:  # learner code may raise anything, even SystemExit
        if tripped or isinstance(exc, ForbiddenCall):
            return encode({"i": index, "forbidden": tripped[0] if tripped else str(exc)})
        try:
            text = f"{type(exc).__name__}: {exc}"
        except BaseException:  # an exception whose __str__ raises
            text = type(exc).__name__
        return encode({"i": index, "error": text[:2000], "where": _where(exc, fn)[:500],
                       "stub": _raised_by_stub(exc, fn)})


def run_request(request: dict[str, Any], emit: Callable[[str], None]) -> None:
    """Load the learner's function and emit one outcome line per case."""
    import dill

    try:
        fn = dill.loads(request["blob"])
    except BaseException as exc:
        emit(encode({"load_error": f"{type(exc).__name__}: {exc}"[:2000]}))
        return
    with tripwires(request.get("forbidden", ())) as tripped:
        _ACTIVE.append(tripped)
        for index, (call, args, kwargs) in enumerate(request["calls"]):
            emit(outcome(index, fn, call, tuple(args), dict(kwargs), tripped))
