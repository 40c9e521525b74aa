"""One grading run (`Grader`): a verified copy of dpsim, the limits, the secret, and for each
notebook its own boxes, its functions collected and each exercise's answers judged here.

Per notebook a checking sandbox (`grading.sandbox`, in its own box when isolated) starts at
the same time as the notebook's kernel (`collect`) and runs the collected functions on each
exercise's case inputs, built here with the student's own seed; the answers are compared
here (`grading.core.check_blob`), so the expected values never enter a box. Each exercise is
judged on one function (`submission.graded_name`); every check's time counts against the
notebook's limit; points are all-or-nothing per exercise.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import nbformat

from dpsim.course.grading import box
from dpsim.course.grading.box_group import BoxGroup
from dpsim.course.grading.core import GraderError, check_blob
from dpsim.course.grading.grade.collect import DUMP_CELL, parse_dump, run_boxed, run_unboxed
from dpsim.course.grading.grade.submission import (
    Submission,
    graded_name,
    notebook_exercises,
)
from dpsim.course.grading.kernel import Limits
from dpsim.course.grading.registry import Exercise, all_exercises, student_seed
from dpsim.course.grading.results import ExerciseGrade, NotebookGrade
from dpsim.course.grading.sandbox import Sandbox
from dpsim.course.grading.trusted_copy import TrustedCopy

SECRET_VARIABLE = "DPSIM_GRADING_SECRET"
PASSED_ENV = ("LANG", "LANGUAGE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "DPSIM_START_METHOD")  # the only variables a box gets from this environment


class Grader:
    """One grading run: a verified copy of dpsim, limits, the secret, boxes per notebook."""

    def __init__(self, limits: Limits | None = None, check_timeout_s: float = 120.0,
                 isolate: bool = True) -> None:
        self.limits = limits or Limits()
        self.check_timeout_s = check_timeout_s
        self.isolate = isolate
        self.secret = os.environ.get(SECRET_VARIABLE, "")
        all_exercises()  # import every chapter module before any notebook runs
        self.copy = TrustedCopy()
        self.copy.redirect_package()
        self.env = {k: v for k, v in os.environ.items() if k != SECRET_VARIABLE}
        self.box_limits = box.BoxLimits(memory_bytes=self.limits.memory_bytes,
                                        cpu_s=int(self.limits.notebook_timeout_s) + 300)

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the copy; warn if dpsim's own source changed (this run used the files
        read at start; a later run would read the changed ones)."""
        changed = self.copy.source_changes()
        if changed:
            print(f"grade: WARNING: dpsim's source changed while grading ({', '.join(changed[:5])}"
                  f"{' ...' if len(changed) > 5 else ''}); these grades used the files read at "
                  "start; restore the source before grading again")
        self.copy.close()

    def _box_env(self) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k in PASSED_ENV or k.startswith("LC_")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def _sandbox(self, group: BoxGroup | None = None) -> Sandbox:
        """This notebook's own checking process (in its own box, and its `group`, when
        isolated)."""
        if not self.isolate:
            return Sandbox(lib=self.copy.root, memory_bytes=self.limits.memory_bytes,
                           env=self.env)
        root, limits = self.copy.root, self.box_limits

        def wrap(argv: list[str], env: dict[str, str]) -> list[str]:
            return box.command(argv, root, env, limits)

        return Sandbox(lib=Path(box.BOX_LIB), memory_bytes=self.limits.memory_bytes,
                       env=self._box_env(), wrap=wrap, preexec=box.rlimits(limits, group))

    def collect(self, nb: nbformat.NotebookNode, names: list[str], notes: list[str],
                deadline: float | None = None) -> dict[str, bytes | str]:
        """Run the notebook in its own kernel (in its own box when isolated); the functions
        it defined. A box still running at `deadline` (monotonic seconds) is killed whole."""
        marker = f"__dpsim_functions_{secrets.token_hex(8)}__ "
        cells = [c.source for c in nb.cells if c.cell_type == "code"]
        dump = DUMP_CELL.format(names=names, marker=marker)
        token = secrets.token_hex(12)
        if self.isolate:
            text = run_boxed(cells, dump, token, notes, self.copy.root, self._box_env(),
                             self.limits, self.box_limits, deadline)
        else:
            text = run_unboxed(cells, dump, token, notes, self.copy.manifest, self.env,
                               self.limits)
        return parse_dump(text, marker)

    def _restore(self, notes: list[str]) -> None:
        changes = self.copy.verify()
        if changes:
            notes.append("the grader's copy of dpsim was changed and has been restored: "
                         + ", ".join(changes[:5]) + (" ..." if len(changes) > 5 else ""))

    def grade(self, sub: Submission, only: list[Exercise] | None = None) -> NotebookGrade:
        """Run one notebook and grade its exercises (`only`: the assignment's, and nothing
        else; see the module docstring)."""
        started = time.monotonic()
        deadline = started + self.limits.notebook_timeout_s
        grade = NotebookGrade(str(sub.path), student=sub.student, digest=sub.digest,
                              notes=list(sub.notes))
        if sub.nb is None:
            for ex in notebook_exercises(sub.path, nbformat.v4.new_notebook(), only):
                grade.grades[ex.exercise_id] = ExerciseGrade(
                    ex.exercise_id, 0, ex.points, sub.problem, "failed", ex.title)
            grade.notes.append(sub.problem)
            return grade
        nb = sub.nb
        exercises = notebook_exercises(sub.path, nb, only)
        if not exercises:
            grade.notes.append("no exercises found (no NN_ chapter prefix, "
                               "no check(\"N.M\", ...))")
            return grade
        plan = {ex.exercise_id: graded_name(ex, nb) for ex in exercises}
        group = box.group(self.box_limits) if self.isolate else None
        sandbox = self._sandbox(group)
        sandbox.start()  # imports torch while the notebook runs
        try:
            found = self.collect(nb, sorted(set(plan.values())), grade.notes, deadline)
            seed = student_seed(sub.student, self.secret)
            for ex in exercises:
                grade.grades[ex.exercise_id] = self._grade_one(
                    ex, plan[ex.exercise_id], found, seed, grade.notes, sandbox, deadline)
        finally:
            sandbox.close()
            note = group.finish("checking") if group is not None else None
            if note:
                grade.notes.append(note)
        grade.seconds = time.monotonic() - started
        return grade

    def _grade_one(self, ex: Exercise, name: str, found: dict[str, bytes | str],
                   seed: int, notes: list[str], sandbox: Sandbox, deadline: float
                   ) -> ExerciseGrade:
        blob = found.get(name)
        if not isinstance(blob, bytes):  # why the function could not be sent
            why = (f"`{name}` {blob}" if isinstance(blob, str)
                   else f"`{name}` is not defined in the notebook")
            return ExerciseGrade(ex.exercise_id, 0, ex.points, why, "failed", ex.title)
        left = deadline - time.monotonic()
        if left < 1.0:
            return ExerciseGrade(
                ex.exercise_id, 0, ex.points,
                f"not checked: the notebook's time limit "
                f"({self.limits.notebook_timeout_s:g} s, its cells and checks together) "
                "ran out before this check", "failed", ex.title)
        if not self.isolate:
            self._restore(notes)
        try:
            result = check_blob(ex.exercise_id, blob, sandbox, seed,
                                min(self.check_timeout_s, left))
        except GraderError as exc:
            return ExerciseGrade(ex.exercise_id, 0, ex.points, str(exc), "error", ex.title)
        except Exception as exc:  # the comparison met something it did not expect
            return ExerciseGrade(ex.exercise_id, 0, ex.points,
                                 f"the grader failed judging this answer: "
                                 f"{type(exc).__name__}: {str(exc)[:300]}", "error",
                                 ex.title)
        return ExerciseGrade(ex.exercise_id, ex.points if result.ok else 0, ex.points,
                             None if result.ok else result.message,
                             "passed" if result.ok else "failed", ex.title)
