"""The registry of graded exercises: what each one asks for and the cases it is checked on.

A chapter module registers an exercise with the `exercise` decorator on a function that
makes its test cases (`Case`s, built from a seeded `random.Random`); `get_exercise`,
`chapter_exercises` and `all_exercises` find them, importing the chapter's modules on first
use: every module of `dpsim/course/exercises/` named `chNN` or `chNN_<topic>` belongs to
chapter NN. Running a check on the cases is `core`'s job. See the package docstring for the
pattern a chapter follows.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
import random
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dpsim.sim import require_choice, require_int

ID_PATTERN = re.compile(r"^(\d+)\.(\d+)$")
CHAPTER_MODULE = re.compile(r"ch(\d+)(_\w+)?")  # chNN, or chNN_<topic>: a module of chapter NN


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
    # the exercise's stated float tolerance, the least every case allows (see compare:
    # an expected float allows FLOAT32_REL_TOL anyway; a case may allow more)
    rel_tol: float = 0.0
    abs_tol: float = 0.0

    def tolerance(self, case: Case) -> tuple[float, float]:
        """(rel_tol, abs_tol) a case is compared with: its own, at least the exercise's."""
        return max(case.rel_tol, self.rel_tol), max(case.abs_tol, self.abs_tol)

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
    Any id is accepted: lone surrogates and a folder name's non-UTF-8 bytes (as
    `os.fsdecode` gives them) are hashed as they stand.
    """
    digest = hashlib.sha256(f"{secret}\0{student}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:6], "big")


_REGISTRY: dict[str, Exercise] = {}
_imported: set[str] = set()  # chapter modules already imported


def exercise(exercise_id: str, *, function: str, title: str, points: int = 1,
             forbidden: tuple[str, ...] = (), rel_tol: float = 0.0, abs_tol: float = 0.0
             ) -> Callable[[CaseMaker], CaseMaker]:
    """Register the decorated case maker as exercise `exercise_id` (e.g. "2.1");
    `rel_tol`/`abs_tol`: the float tolerance every case of it allows at least."""
    if not ID_PATTERN.match(exercise_id):
        raise ValueError(f"exercise_id={exercise_id!r} is not of the form 'N.M' (e.g. '2.1')")
    if not function.isidentifier():
        raise ValueError(f"function={function!r} is not a Python identifier")
    require_int("points", points, 1)
    for name, tol in (("rel_tol", rel_tol), ("abs_tol", abs_tol)):
        if not 0.0 <= tol < 1.0:
            raise ValueError(f"{name}={tol!r} is not a tolerance: it must be in [0, 1)")

    def register(make_cases: CaseMaker) -> CaseMaker:
        old = _REGISTRY.get(exercise_id)
        if old is not None and old.make_cases.__module__ != make_cases.__module__:
            raise ValueError(f"exercise {exercise_id} is registered twice: in "
                             f"{old.make_cases.__module__} and {make_cases.__module__}")
        _REGISTRY[exercise_id] = Exercise(exercise_id, function, title, points, make_cases,
                                          tuple(forbidden), rel_tol, abs_tol)
        return make_cases

    return register


def _sort_key(exercise_id: str) -> tuple[int, int]:
    chapter, number = exercise_id.split(".")
    return int(chapter), int(number)


def chapter_modules(chapter: int | None = None) -> list[str]:
    """Names of the modules dpsim/course/exercises/chNN.py and chNN_<topic>.py (of one
    chapter, or all)."""
    import dpsim.course.exercises as package

    names = []
    for info in pkgutil.iter_modules(package.__path__):
        match = CHAPTER_MODULE.fullmatch(info.name)
        if match and (chapter is None or int(match.group(1)) == chapter):
            names.append(f"{package.__name__}.{info.name}")
    return sorted(names)


def _discover(chapter: int | None = None) -> None:
    """Import the chapter's modules (they register their exercises on import)."""
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
