"""Registry of graded exercises and the checks that graded notebook cells run.

An exercise is registered by its chapter module with the `exercise` decorator on a
function that makes the test cases; `check(exercise_id, fn)` calls the learner's `fn`
on every case and prints one line `PASS 1.2 (3/3)`, or raises `ExerciseFailed` saying
which input failed and what kind of mistake it looks like (never the expected value).
Cases are built here; only their inputs reach the learner's function (in a sandbox
process inside a notebook, see `sandbox`), and only plain data comes back to be compared
(`plain`, `compare`). See the package docstring for the pattern a chapter follows.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import random
import re
import sys
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dpsim.course.grading.compare import hint, is_number, plain_value, same
from dpsim.course.grading.plain import decode
from dpsim.sim.validation import require_choice, require_int

ID_PATTERN = re.compile(r"^(\d+)\.(\d+)$")


class ExerciseFailed(AssertionError):
    """The learner's function gave a wrong answer, raised, or is still a stub."""


class GraderError(RuntimeError):
    """The grader itself failed (building cases, the sandbox): never the learner's zero."""


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
    # how to run fn: None calls fn(*args, **kwargs); else a module-level function of a
    # dpsim.course.grading module, called in the sandbox as call(fn, *args, **kwargs)
    call: Callable[..., Any] | None = None
    # grader-side hint from the plain answer (None: use `mistakes`); never runs learner code
    explain: Callable[[Any], str | None] | None = None


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

    def case_seed(self, seed: int | None = None) -> int:
        """The seed of this exercise's cases: the default, or one mixed from `seed`."""
        if seed is None:
            return self.seed
        return zlib.crc32(f"dpsim-exercise-{self.exercise_id}-{seed}".encode())

    def cases(self, seed: int | None = None) -> list[Case]:
        """Build the cases (seeded python and torch RNGs; the caller's RNG state is kept).

        `seed=None` gives every learner the same cases; `student_seed(...)` gives each its own.
        """
        import torch

        case_seed = self.case_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(case_seed)
            return list(self.make_cases(random.Random(case_seed)))


def student_seed(student: str, secret: str = "") -> int:
    """A seed of a student's own cases: stable for one student id, different between ids.

    `secret` (the grader's `DPSIM_GRADING_SECRET`) keeps a learner from working out the seed.
    """
    digest = hashlib.sha256(f"{secret}\0{student}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


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
    """Names of the chapter modules dpsim/course/exercises/chNN.py (of one chapter, or all)."""
    import dpsim.course.exercises as package

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


# --- running a check -------------------------------------------------------------------

_plain, _is_number = plain_value, is_number  # older names, kept for callers
CHECK_TIMEOUT_S = 120.0  # one exercise's cases in the sandbox
TODO = ("Exercise {id} is not done yet: replace the `raise NotImplementedError` line in "
        "`{function}` with your code, then run this cell again.")


def rank_error(exc: Exception) -> Exception:
    """A failed rank's error as the learner should see it: a stub's NotImplementedError
    (raised on a rank by `runtime.launch`) is raised again as one; other errors unchanged."""
    if getattr(exc, "exc_type", None) == "NotImplementedError":
        return NotImplementedError(getattr(exc, "summary", str(exc)))
    return exc


def _in_process(fn: Callable[..., Any], ex: Exercise, cases: list[Case]) -> Any:
    """Run the cases here (trusted callers: tests, scripts), through the same plain-data
    path as the sandbox, so both judge the same answers."""
    from dpsim.course.grading.sandbox import Reply
    from dpsim.course.grading.sandbox_worker import outcome, tripwires

    reply = Reply()
    with tripwires(ex.forbidden) as tripped:
        for index, case in enumerate(cases):
            reply.outcomes[index] = decode(outcome(index, fn, case.call, case.args,
                                                   case.kwargs, tripped))
    return reply


def _calls(cases: list[Case]) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    return [(case.call, tuple(case.args), dict(case.kwargs)) for case in cases]


def judge(ex: Exercise, cases: list[Case], reply: Any, timeout_s: float) -> CheckResult:
    """Compare a sandbox reply (plain answers) with the cases' expected values."""
    head = f"Exercise {ex.exercise_id} ({ex.title})"
    total = len(cases)
    if reply.ended == "server":
        raise GraderError(f"the checking process failed: {reply.detail}")
    if reply.load_error is not None:
        return CheckResult(ex.exercise_id, 0, total, f"{head}: your function could not be "
                           f"loaded in the checking process: {reply.load_error}")
    passed, first = 0, None
    for index, case in enumerate(cases):
        where = f"case {index + 1} of {total}:\n  input: {case.label}"
        row = reply.outcomes.get(index)
        if row is None:
            why = {"timeout": f"the check took longer than {timeout_s:g} s",
                   "oversize": "your answer is too large to check",
                   "exit": f"your function ended the checking process ({reply.detail})"
                   }.get(reply.ended, "your function ended the checking process")
            first = first or (f"{head} failed on {where}\n  {why}", case)
            break
        if "forbidden" in row:
            message = (f"this exercise asks you to write it yourself, not to call "
                       f"{row['forbidden']}")
            first = first or (f"{head} failed on {where}\n  {message}", case)
        elif "error" in row:
            if row.get("stub"):
                todo = TODO.format(id=ex.exercise_id, function=ex.function)
                return CheckResult(ex.exercise_id, 0, total, todo, case.expected, case.label)
            first = first or (f"{head} failed on {where}\n  your function raised "
                              f"{row['error']}{row.get('where', '')}", case)
        elif same(row.get("answer"), case.expected, case.rel_tol, case.abs_tol):
            passed += 1
        elif first is None:
            answer = row.get("answer")
            words = case.explain(answer) if case.explain is not None else None
            words = words or hint(answer, case.expected, case.mistakes, case.rel_tol,
                                  case.abs_tol)
            shown = repr(answer)
            shown = shown if len(shown) <= 300 else shown[:300] + " ..."
            first = (f"{head} failed on {where}\n  your answer: {shown}\n  hint: {words}", case)
    if first is None:
        return CheckResult(ex.exercise_id, passed, total)
    message = f"{first[0]}\n  ({passed} of {total} cases passed)"
    return CheckResult(ex.exercise_id, passed, total, message, first[1].expected, first[1].label)


def check_blob(exercise_id: str, blob: bytes, sandbox: Any, seed: int | None = None,
               timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """Check a learner's function given as dill bytes; it is unpickled in the sandbox only.
    GraderError when the cases cannot be built or the sandbox itself fails."""
    ex = get_exercise(exercise_id)
    try:
        cases = ex.cases(seed)
    except Exception as exc:
        raise GraderError(f"building the cases of {exercise_id} failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    reply = sandbox.run(blob, ex.forbidden, _calls(cases), timeout_s)
    return judge(ex, cases, reply, timeout_s)


def run_check(exercise_id: str, fn: Callable[..., Any], seed: int | None = None,
              sandbox: Any = None, timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """Try `fn` on every case of the exercise; never raises for the learner's mistakes.

    `sandbox=None` runs `fn` in this process (tests); a `sandbox.Sandbox` runs it there.
    """
    ex = get_exercise(exercise_id)
    head = f"Exercise {ex.exercise_id} ({ex.title})"
    if not callable(fn):
        return CheckResult(ex.exercise_id, 0, 0,
                           f"{head}: check() needs your function `{ex.function}`, "
                           f"got a {type(fn).__name__}")
    if sandbox is None:
        cases = ex.cases(seed)
        return judge(ex, cases, _in_process(fn, ex, cases), timeout_s)
    import dill

    try:
        blob = dill.dumps(fn, recurse=True)
    except Exception as exc:
        return CheckResult(ex.exercise_id, 0, len(ex.cases(seed)),
                           f"{head}: your function cannot be sent to the checking process "
                           f"(the grader could not either): {type(exc).__name__}: {exc}")
    return check_blob(exercise_id, blob, sandbox, seed, timeout_s)


def _use_sandbox() -> bool:
    """Sandbox inside a Jupyter kernel (or DPSIM_CHECK_SANDBOX=1); in-process elsewhere."""
    choice = os.environ.get("DPSIM_CHECK_SANDBOX", "")
    if choice in ("0", "1"):
        return choice == "1"
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def check(exercise_id: str, fn: Callable[..., Any]) -> None:
    """Print `PASS N.M (k/k)` if `fn` answers every case right, else raise ExerciseFailed.

    In a notebook the cases run in the sandbox, as the grader runs them; `DPSIM_STUDENT`
    (if set) picks the student's own cases, as the grader does (see the package docstring).
    """
    student = os.environ.get("DPSIM_STUDENT")
    seed = student_seed(student) if student else None
    if _use_sandbox():
        from dpsim.course.grading.sandbox import shared

        result = run_check(exercise_id, fn, seed=seed, sandbox=shared())
    else:
        result = run_check(exercise_id, fn, seed=seed)
    if not result.ok:
        raise ExerciseFailed(result.message)
    print(f"PASS {result.exercise_id} ({result.passed}/{result.total})")
