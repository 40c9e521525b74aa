"""What runs inside the sandbox: the learner's function on the case inputs, answers out.

A request holds the learner's function as dill bytes (unpickled here and nowhere else),
the exercise's `forbidden` names, and for every case only its harness (`Case.call`, a
module-level function pickled by reference), args and kwargs. Each case's outcome is one
JSON line (see `outcome`): the answer as plain data, the error the function raised, or the
forbidden name it called. Expected values never enter this process.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any

from dpsim.course.grading.plain import encode, to_plain
from dpsim.course.grading.reply import CaseOutcome

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


Fingerprint = tuple[str, bytes, tuple[str, ...]]  # name, bytecode, names used
PROFILE_REMOVED = "sys.setprofile (the check watches which functions your code runs)"


def _fingerprint(code: types.CodeType) -> Fingerprint:
    """A function's name, bytecode and the names it uses: a copy of a library function keeps
    all three; an answer that computes the same thing the same way is named as its exercise
    asks, so it is not taken for a copy (3.1's `chunk_sizes` is `scatter_sizes`'s two lines)."""
    return code.co_name, code.co_code, code.co_names


@functools.lru_cache(maxsize=64)
def reference_code(dotted: str) -> Fingerprint | None:
    """The fingerprint (bytecode and names) of the function `dotted` (a module attribute,
    perhaps re-exported) as compiled from the source file of the module that defines it:
    what a fresh copy of it runs, however it was made. None for what has no Python source."""
    module_name, _, attr = dotted.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
        home = importlib.import_module(getattr(obj, "__module__", None) or module_name)
        path = inspect.getsourcefile(home)
        with open(path or "", encoding="utf-8") as f:
            code = compile(f.read(), path or "", "exec")
    except (OSError, TypeError, SyntaxError, ImportError, AttributeError):
        return None
    name = getattr(obj, "__name__", attr)
    stack = [code]
    while stack:
        current = stack.pop()
        if current.co_name == name and current is not code:
            return _fingerprint(current)
        stack += [c for c in current.co_consts if isinstance(c, types.CodeType)]
    return None


class _Watcher:
    """A profile function (sys.setprofile) that records the forbidden name when a function
    compiled from a forbidden function's source starts: a copy made by importlib.reload,
    spec_from_file_location + exec_module or exec of the module's source escapes the
    tripwires on the name and the function object, not this."""

    def __init__(self, forbidden: tuple[str, ...], tripped: list[str]) -> None:
        self.wanted = {fp: name for name in forbidden if (fp := reference_code(name)) is not None}
        self.tripped = tripped

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = self.wanted.get(_fingerprint(frame.f_code))
            if name is not None and not self.tripped:
                self.tripped.append(name)

    def intact(self) -> bool:
        """Re-install the watcher if the learner's code removed it; False if it had."""
        if sys.getprofile() is self:
            return True
        sys.setprofile(self)
        return False


_WATCHERS: list[_Watcher] = []  # the watcher of the tripwires now in place


@contextlib.contextmanager
def tripwires(forbidden: list[str] | tuple[str, ...]) -> Iterator[list[str]]:
    """Replace each dotted name (module attribute) by a tripwire; restore them on exit.

    The function object itself gets the tripwire's code too (when it has no closure), so a
    reference taken before (`from dpsim.sim.cost.memory import f`, a pickled reference) trips as
    well; and a watcher (sys.setprofile, and threading.setprofile for threads started
    meanwhile) records a call of any function compiled from the forbidden function's own
    source, so a fresh copy of its module trips too (`outcome` reads `tripped` after each
    case).
    """
    tripped: list[str] = []
    undo: list[Callable[[], None]] = []
    watcher = _Watcher(tuple(forbidden), tripped)  # before the code of any is replaced
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
        if forbidden:
            undo.append(_profile_restorer(sys.getprofile(), threading.getprofile()))
            sys.setprofile(watcher)
            threading.setprofile(watcher)
            _WATCHERS.append(watcher)
            undo.append(_pop_watcher)
        yield tripped
    finally:
        for step in reversed(undo):
            step()


def _pop_watcher() -> None:
    _WATCHERS.pop()


def _watched(tripped: list[str]) -> None:
    """After a case: a removed watcher counts as a forbidden call (and is put back)."""
    if _WATCHERS and not _WATCHERS[-1].intact() and not tripped:
        tripped.append(PROFILE_REMOVED)


def _profile_restorer(previous: Any, previous_threads: Any) -> Callable[[], None]:
    def restore() -> None:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)

    return restore


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
        _watched(tripped)
        if tripped:
            return encode(CaseOutcome(i=index, forbidden=tripped[0]))
        return encode(CaseOutcome(i=index, answer=to_plain(answer)))
    except BaseException as exc:  # learner code may raise anything, even SystemExit
        _watched(tripped)
        if tripped or isinstance(exc, ForbiddenCall):
            return encode(CaseOutcome(i=index, forbidden=tripped[0] if tripped else str(exc)))
        try:
            text = f"{type(exc).__name__}: {exc}"
        except BaseException:  # an exception whose __str__ raises
            text = type(exc).__name__
        return encode(CaseOutcome(i=index, error=text[:2000], where=_where(exc, fn)[:500],
                                  stub=_raised_by_stub(exc, fn)))


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
