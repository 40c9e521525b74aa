"""Registry of graded exercises and the checks that graded notebook cells run.

An exercise is registered by its chapter module with the `exercise` decorator on a
function that makes the test cases; `check(exercise_id, fn)` calls the learner's `fn`
on every case and prints one line `PASS 1.2 (3/3)`, or raises `ExerciseFailed` saying
which input failed and what kind of mistake it looks like (never the expected value).
See the package docstring (`dpsim.course.grading`) for the pattern a chapter follows.
"""

from __future__ import annotations

import importlib
import math
import numbers
import pkgutil
import random
import re
import traceback
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dpsim.validation import require_choice, require_int

ID_PATTERN = re.compile(r"^(\d+)\.(\d+)$")


class ExerciseFailed(AssertionError):
    """The learner's function gave a wrong answer, raised, or is still a stub."""


@dataclass(frozen=True)
class Case:
    """One input to try the learner's function on, and the right answer for it."""

    label: str  # the input in words, shown when the answer is wrong, e.g. "batch_size=8"
    args: tuple[Any, ...] = ()
    expected: Any = None
    mistakes: dict[str, Any] = field(default_factory=dict)  # hint -> answer it gives (None: skip)
    kwargs: dict[str, Any] = field(default_factory=dict)
    rel_tol: float = 0.0  # relative tolerance for float answers (0: exact)
    abs_tol: float = 0.0  # absolute tolerance for float answers (0: none)
    call: Callable[[Callable[..., Any]], Any] | None = None  # how to run fn; default fn(*args)


CaseMaker = Callable[[random.Random], Iterable[Case]]


@dataclass(frozen=True)
class Exercise:
    """A registered exercise: what the learner writes and how it is checked."""

    exercise_id: str  # "1.2": chapter 1, exercise 2
    function: str  # name of the function the learner writes in the notebook
    title: str
    points: int
    make_cases: CaseMaker
    # dotted names of dpsim functions that answer this exercise; calling one earns nothing
    forbidden: tuple[str, ...] = ()

    @property
    def chapter(self) -> int:
        """Chapter number (the part of the id before the dot)."""
        return int(self.exercise_id.split(".")[0])

    @property
    def seed(self) -> int:
        """Seed of the random cases, derived from the id so every run checks the same inputs."""
        return zlib.crc32(f"dpsim-exercise-{self.exercise_id}".encode())

    def cases(self) -> list[Case]:
        """Build the cases (seeded python and torch RNGs; the caller's RNG state is kept)."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return list(self.make_cases(random.Random(self.seed)))


@dataclass(frozen=True)
class CheckResult:
    """Outcome of checking one function against one exercise."""

    exercise_id: str
    passed: int  # cases answered right
    total: int
    message: str | None = None  # why it failed; None when every case passed
    expected: Any = None  # right answer of the first failed case (never shown to the learner)
    failed_label: str | None = None  # input of the first failed case

    @property
    def ok(self) -> bool:
        """True when every case passed."""
        return self.message is None and self.passed == self.total


_REGISTRY: dict[str, Exercise] = {}
_imported: set[str] = set()  # chapter modules already imported


def exercise(exercise_id: str, *, function: str, title: str, points: int = 1,
             forbidden: tuple[str, ...] = ()) -> Callable[[CaseMaker], CaseMaker]:
    """Register the decorated case maker as exercise `exercise_id` (e.g. "2.1")."""
    if not ID_PATTERN.match(exercise_id):
        raise ValueError(f"exercise_id={exercise_id!r} is not of the form 'N.M' (e.g. '2.1')")
    if not function.isidentifier():
        raise ValueError(f"function={function!r} is not a Python identifier")
    require_int("points", points, 1)

    def register(make_cases: CaseMaker) -> CaseMaker:
        old = _REGISTRY.get(exercise_id)
        if old is not None and old.make_cases.__module__ != make_cases.__module__:
            raise ValueError(f"exercise {exercise_id} is registered twice: in "
                             f"{old.make_cases.__module__} and {make_cases.__module__}")
        _REGISTRY[exercise_id] = Exercise(exercise_id, function, title, points, make_cases,
                                          tuple(forbidden))
        return make_cases

    return register


def _sort_key(exercise_id: str) -> tuple[int, int]:
    chapter, number = exercise_id.split(".")
    return int(chapter), int(number)


def chapter_modules(chapter: int | None = None) -> list[str]:
    """Names of the chapter modules dpsim/grading/chNN.py (of one chapter, or all)."""
    import dpsim.course.grading as package

    names = []
    for info in pkgutil.iter_modules(package.__path__):
        match = re.fullmatch(r"ch(\d+)", info.name)
        if match and (chapter is None or int(match.group(1)) == chapter):
            names.append(f"{package.__name__}.{info.name}")
    return sorted(names)


def _discover(chapter: int | None = None) -> None:
    """Import the chapter modules (they register their exercises on import)."""
    for name in chapter_modules(chapter):
        if name not in _imported:
            importlib.import_module(name)
            _imported.add(name)


def all_exercises() -> list[Exercise]:
    """Every registered exercise, in chapter order."""
    _discover()
    return [_REGISTRY[i] for i in sorted(_REGISTRY, key=_sort_key)]


def chapter_exercises(chapter: int) -> list[Exercise]:
    """The exercises of one chapter, in order."""
    _discover(chapter)
    return [_REGISTRY[i] for i in sorted(_REGISTRY, key=_sort_key)
            if _REGISTRY[i].chapter == chapter]


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise registered as `exercise_id` (ValueError listing the known ids if none)."""
    match = ID_PATTERN.match(exercise_id) if isinstance(exercise_id, str) else None
    if match:
        _discover(int(match.group(1)))  # only this chapter's module: a fast first check()
    if exercise_id not in _REGISTRY:
        _discover()
    require_choice("exercise_id", exercise_id, sorted(_REGISTRY, key=_sort_key))
    return _REGISTRY[exercise_id]


# --- comparing answers -----------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Tensors and numpy values as python numbers / nested lists."""
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        return value.tolist()
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def same(answer: Any, expected: Any, rel_tol: float = 0.0, abs_tol: float = 0.0) -> bool:
    """True if `answer` equals `expected` (numbers within rel_tol or abs_tol, sequences
    elementwise)."""
    answer, expected = _plain(answer), _plain(expected)
    if _is_number(expected):
        if not _is_number(answer):
            return False
        return math.isclose(float(answer), float(expected), rel_tol=rel_tol,
                            abs_tol=abs_tol) if rel_tol or abs_tol else answer == expected
    if isinstance(expected, (list, tuple)):
        return (isinstance(answer, (list, tuple)) and len(answer) == len(expected)
                and all(same(a, e, rel_tol, abs_tol)
                        for a, e in zip(answer, expected, strict=True)))
    if isinstance(expected, dict):
        return (isinstance(answer, dict) and answer.keys() == expected.keys()
                and all(same(answer[k], expected[k], rel_tol, abs_tol) for k in expected))
    return bool(answer == expected)


def _shape_problem(answer: Any, expected: Any) -> str | None:
    """What is wrong with the kind of answer, before comparing values (None if nothing)."""
    answer, expected = _plain(answer), _plain(expected)
    if answer is None:
        return "your function returned None: did you forget `return`?"
    if _is_number(expected):
        if not _is_number(answer):
            return f"your function returned a {type(answer).__name__}; the answer is a number"
        if isinstance(expected, numbers.Integral) and float(answer) != math.floor(float(answer)):
            return (f"your answer {answer!r} is not a whole number; round it the way the "
                    "question asks (// divides and rounds down)")
    if isinstance(expected, (list, tuple)):
        if not isinstance(answer, (list, tuple)):
            return f"your function returned a {type(answer).__name__}; the answer is a list"
        if len(answer) != len(expected):
            return f"your list has {len(answer)} entries; it needs {len(expected)}"
    return None


def _direction(answer: Any, expected: Any) -> str:
    answer, expected = _plain(answer), _plain(expected)
    if not (_is_number(answer) and _is_number(expected)):
        return "your answer is not the right one for this input"
    a, e = float(answer), float(expected)
    for k in (2, 4, 8):
        if e and a == e * k:
            return f"your answer is exactly {k}x too large"
        if a and e == a * k:
            return f"your answer is exactly {k}x too small"
    return "your answer is too large" if a > e else "your answer is too small"


# --- running a check -------------------------------------------------------------------


def _where(exc: BaseException, fn: Callable[..., Any]) -> str:
    """' (line N of your code: ...)' for the deepest frame in the learner's own file."""
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if not frames:
        return ""
    frame = frames[-1]
    code = f": {frame.line.strip()}" if frame.line else ""
    return f" at line {frame.lineno} of your code{code}"


def _raised_by_stub(exc: BaseException, fn: Callable[..., Any]) -> bool:
    if not isinstance(exc, NotImplementedError):
        return False
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and (frames[-1].filename == filename or "write your code" in str(exc))


def rank_error(exc: Exception) -> Exception:
    """A failed rank's error as the learner should see it: a stub's NotImplementedError
    (raised on a rank by `runtime.launch`) is raised again as one; other errors unchanged."""
    if getattr(exc, "exc_type", None) == "NotImplementedError":
        return NotImplementedError(getattr(exc, "summary", str(exc)))
    return exc


def run_check(exercise_id: str, fn: Callable[..., Any]) -> CheckResult:
    """Try `fn` on every case of the exercise; never raises for the learner's mistakes."""
    ex = get_exercise(exercise_id)
    head = f"Exercise {ex.exercise_id} ({ex.title})"
    if not callable(fn):
        return CheckResult(ex.exercise_id, 0, 0,
                           f"{head}: check() needs your function `{ex.function}`, "
                           f"got a {type(fn).__name__}")
    cases = ex.cases()
    total = len(cases)
    passed = 0
    first: tuple[str, Case] | None = None
    for index, case in enumerate(cases, start=1):
        where = f"case {index} of {total}:\n  input: {case.label}"
        try:
            answer = case.call(fn) if case.call else fn(*case.args, **case.kwargs)
        except Exception as exc:
            if _raised_by_stub(exc, fn):
                todo = (f"Exercise {ex.exercise_id} is not done yet: replace the `raise "
                        f"NotImplementedError` line in `{ex.function}` with your code, then "
                        "run this cell again.")
                return CheckResult(ex.exercise_id, 0, total, todo, case.expected, case.label)
            if first is None:
                first = (f"{head} failed on {where}\n  your function raised "
                         f"{type(exc).__name__}: {exc}{_where(exc, fn)}", case)
            continue
        if same(answer, case.expected, case.rel_tol, case.abs_tol):
            passed += 1
            continue
        if first is None:
            first = (f"{head} failed on {where}\n  your answer: {answer!r}\n  "
                     f"hint: {_hint(answer, case)}", case)
    if first is None:
        return CheckResult(ex.exercise_id, passed, total)
    message = f"{first[0]}\n  ({passed} of {total} cases passed)"
    return CheckResult(ex.exercise_id, passed, total, message, first[1].expected, first[1].label)


def _hint(answer: Any, case: Case) -> str:
    problem = _shape_problem(answer, case.expected)
    if problem:
        return problem
    hints = [hint for hint, wrong in case.mistakes.items()
             if wrong is not None and not same(wrong, case.expected, case.rel_tol, case.abs_tol)
             and same(answer, wrong, case.rel_tol, case.abs_tol)]
    if len(hints) == 1:
        return f"looks like {hints[0]}"
    if hints:
        return "looks like one of these:" + "".join(f"\n    - {h}" for h in hints)
    return _direction(answer, case.expected)


def check(exercise_id: str, fn: Callable[..., Any]) -> None:
    """Print `PASS N.M (k/k)` if `fn` answers every case right, else raise ExerciseFailed."""
    result = run_check(exercise_id, fn)
    if not result.ok:
        raise ExerciseFailed(result.message)
    print(f"PASS {result.exercise_id} ({result.passed}/{result.total})")
