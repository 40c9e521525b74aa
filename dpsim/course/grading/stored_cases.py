"""The public cases as stored data: what `check()` judges in the student's kit.

The student's kit (`python -m dpsim course release OUT`, see `grading.release`) holds no
answer key: no `dpsim/course/exercises/`, whose case makers compute the right answers. In
its place the release stores, per chapter, every exercise's public cases (the ones
`check()` uses: seed None) in `public_cases/chNN.pkl`: each case's input in words, its
arguments, its expected answer, its named mistakes and its tolerances, as computed by the
instructor's kit. They are stored with pickle, not JSON, since an input may be a tensor or
an `nn.Module`. A case's harness (`Case.call`) and grader-side hint (`Case.explain`) are
stored by name, pointing into `dpsim.course.harness`: the release's copy of only those
functions of the key (and what they use), never the case makers.

`check(exercise_id, fn)` judges `fn` on the stored cases with the engine's own sandbox and
judge (`core.judge`), so a stored case gives the same verdict and hint as the case it was
made from. Grades come from the instructor's kit, on each student's hidden cases.
"""

from __future__ import annotations

import functools
import importlib
import io
import pickle
import random
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsim.course.grading.core import (
    CHECK_TIMEOUT_S,
    CheckResult,
    ExerciseFailed,
    judge,
    use_sandbox,
)
from dpsim.course.grading.plain import decode
from dpsim.course.grading.registry import ID_PATTERN, Case, Exercise
from dpsim.course.grading.reply import Reply
from dpsim.course.grading.sandbox import Sandbox, shared
from dpsim.course.grading.sandbox_worker import outcome, tripwires

FOLDER = Path(__file__).with_name("public_cases")  # present in the student's kit only
KEY_PACKAGE = "dpsim.course.exercises"  # the answer key: in the instructor's kit only
HARNESS_PACKAGE = "dpsim.course.harness"  # the release's copy of the key's harnesses
FIELDS = ("exercise_id", "function", "title", "points", "forbidden", "rel_tol", "abs_tol")


@dataclass(frozen=True)
class StoredExercise:
    """One exercise as the student's kit holds it: its description and public cases."""

    exercise: Exercise
    cases: list[Case]


def stored() -> bool:
    """True in the student's kit (it holds stored public cases)."""
    return FOLDER.is_dir()


def harness_function(module: str, name: str) -> Any:
    """The key's `module`.`name` as the student's kit holds it (`dpsim.course.harness`)."""
    return getattr(importlib.import_module(f"{HARNESS_PACKAGE}.{module}"), name)


class _KeyPickler(pickle.Pickler):
    """Pickles what the key defines (functions, classes) by name in `dpsim.course.harness`,
    and records each name (module -> names) so the release copies it there."""

    def __init__(self, file: io.BytesIO, refs: dict[str, set[str]]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.refs = refs

    def reducer_override(self, obj: Any) -> Any:
        module = getattr(obj, "__module__", None)
        if (isinstance(obj, types.FunctionType | type) and isinstance(module, str)
                and module.startswith(KEY_PACKAGE + ".")):
            tail, name = module[len(KEY_PACKAGE) + 1:], obj.__qualname__
            if "." in name:
                raise ValueError(f"{module}.{name} is not a module-level name: the student's "
                                 "kit stores a case's harness and hints by name")
            self.refs.setdefault(tail, set()).add(name)
            return harness_function, (tail, name)
        return NotImplemented


def dump_exercises(exercises: Iterable[Exercise]) -> tuple[bytes, dict[str, set[str]]]:
    """(the pickle of each exercise's fields and public cases, the key's names it uses)."""
    refs: dict[str, set[str]] = {}
    rows = [({f: getattr(ex, f) for f in FIELDS}, ex.cases()) for ex in exercises]
    buffer = io.BytesIO()
    _KeyPickler(buffer, refs).dump(rows)
    return buffer.getvalue(), refs


def _stored_only(rng: random.Random) -> list[Case]:
    raise RuntimeError("the student's kit holds stored cases only; the instructor's kit "
                       "makes cases for a seed")


@functools.lru_cache(maxsize=64)
def _chapter(chapter: int) -> dict[str, StoredExercise]:
    path = FOLDER / f"ch{chapter:02d}.pkl"
    if not path.is_file():
        return {}
    rows = pickle.loads(path.read_bytes())
    return {fields["exercise_id"]: StoredExercise(Exercise(make_cases=_stored_only, **fields),
                                                  cases)
            for fields, cases in rows}


def load(exercise_id: str) -> StoredExercise:
    """The stored exercise `exercise_id` (ValueError naming the ids this kit holds)."""
    match = ID_PATTERN.match(exercise_id) if isinstance(exercise_id, str) else None
    found = _chapter(int(match.group(1))).get(exercise_id) if match else None
    if found is None:
        known = sorted(p.stem for p in FOLDER.glob("ch*.pkl")) if stored() else []
        raise ValueError(f"exercise_id={exercise_id!r} is not an exercise of this kit "
                         f"(its chapters: {', '.join(known) or 'none'})")
    return found


def _in_process(fn: Callable[..., Any], item: StoredExercise) -> Reply:
    """The cases run here, through the same plain-data path as the sandbox."""
    reply = Reply()
    with tripwires(item.exercise.forbidden) as tripped:
        for index, case in enumerate(item.cases):
            reply.outcomes[index] = decode(outcome(index, fn, case.call, case.args,
                                                   case.kwargs, tripped))
    return reply


def run_stored(exercise_id: str, fn: Callable[..., Any], sandbox: Sandbox | None = None,
               timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """Judge `fn` on the stored public cases (in `sandbox`, or here when None)."""
    item = load(exercise_id)
    ex = item.exercise
    if not callable(fn):
        return CheckResult(ex.exercise_id, 0, 0, f"Exercise {ex.exercise_id} ({ex.title}): "
                           f"check() needs your function `{ex.function}`, got a "
                           f"{type(fn).__name__}")
    if sandbox is None:
        return judge(ex, item.cases, _in_process(fn, item), timeout_s)
    from dpsim.runtime.launch.pickling import dumps

    try:
        blob = dumps(fn)
    except Exception as exc:
        return CheckResult(ex.exercise_id, 0, len(item.cases),
                           f"Exercise {ex.exercise_id} ({ex.title}): your function cannot "
                           f"be sent to the checking process: {type(exc).__name__}: {exc}")
    calls = [(case.call, tuple(case.args), dict(case.kwargs)) for case in item.cases]
    return judge(ex, item.cases, sandbox.run(blob, ex.forbidden, calls, timeout_s), timeout_s)


def check(exercise_id: str, fn: Callable[..., Any]) -> None:
    """The student's kit's `check`: `PASS N.M (k/k)` on the public cases, else
    ExerciseFailed (the grade is given on the student's own hidden cases)."""
    result = run_stored(exercise_id, fn, shared() if use_sandbox() else None)
    if not result.ok:
        raise ExerciseFailed(result.message)
    print(f"PASS {result.exercise_id} ({result.passed}/{result.total})")
