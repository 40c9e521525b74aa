"""Grade student notebooks without trusting anything they print, patch or leave behind.

Per notebook: a throwaway folder holds a copy of the notebook and its own read-only copy
of dpsim; a fresh kernel runs the code cells there under time and memory limits
(`grading.kernel`), then prints the learner's functions as dill bytes (base64 in JSON).
The kernel's whole session is then killed. This process never unpickles those bytes:
each exercise's cases are built here, with the student's own seed, and only their inputs
go with the bytes to a sandbox process (`grading.sandbox`), which sends back plain data
(`grading.plain`) compared here (`grading.compare`). The sandbox imports dpsim from a
copy checked against the files read at start before every use (`grading.trusted_copy`:
why a verified copy rather than trusting file permissions). Results come over pipes.

A notebook's exercises are its chapter's (file name `NN_...`) plus every
`check("N.M", name)` in its code; each is tried under its own name and every name passed
to check() for it, and the best result counts. Points are all-or-nothing per exercise.
The student id (whose seed picks the cases) is `--student`, else the notebook metadata
`dpsim.student`, else the notebook's folder and file name (`alice/01_single_device.ipynb`);
`DPSIM_GRADING_SECRET` in the grader's environment is mixed in and never passed on.
See README "For instructors" for what is and is not covered.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat

from dpsim.course.build import CHECK_CALL
from dpsim.course.grading import processes, results
from dpsim.course.grading.core import GraderError, check_blob
from dpsim.course.grading.kernel import Limits, run_notebook
from dpsim.course.grading.registry import (
    Exercise,
    all_exercises,
    chapter_exercises,
    get_exercise,
    student_seed,
)
from dpsim.course.grading.results import ExerciseGrade, NotebookGrade
from dpsim.course.grading.sandbox import Sandbox
from dpsim.course.grading.trusted_copy import TrustedCopy, fresh_copy, remove_tree

SECRET_VARIABLE = "DPSIM_GRADING_SECRET"
# Run first in the student's kernel: check() there would only cost time.
PRELUDE_CELL = '''\
try:
    import dpsim.course.grading as __g, dpsim.course.grading.core as __c
    __g.check = __c.check = lambda *args, **kwargs: None
    del __g, __c
except Exception:
    pass
'''
DUMP_CELL = '''\
def __dpsim_grader_dump(names, marker):
    import base64, json
    import dill
    found = {{}}
    for name in names:
        if name in globals():
            try:
                found[name] = base64.b64encode(dill.dumps(globals()[name], recurse=True)).decode()
            except Exception as exc:
                found[name] = {{"error": f"could not be pickled: {{type(exc).__name__}}: {{exc}}"}}
    print(marker + json.dumps(found), flush=True)
__dpsim_grader_dump({names!r}, {marker!r})
del __dpsim_grader_dump
'''


def notebook_exercises(path: Path, nb: nbformat.NotebookNode) -> list[Exercise]:
    """The exercises a notebook answers: its chapter's and those its code checks."""
    found: dict[str, Exercise] = {}
    match = re.match(r"^(\d+)_", path.name)
    if match:
        found.update((ex.exercise_id, ex) for ex in chapter_exercises(int(match.group(1))))
    known = {ex.exercise_id for ex in all_exercises()}
    for exercise_id, _ in CHECK_CALL.findall(_code(nb)):
        if exercise_id in known:
            found[exercise_id] = get_exercise(exercise_id)
    return [found[i] for i in sorted(found, key=lambda i: tuple(map(int, i.split("."))))]


def _code(nb: nbformat.NotebookNode) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def _candidate_names(ex: Exercise, nb: nbformat.NotebookNode) -> list[str]:
    """The names a function for `ex` may have: names passed to check() for it, its own."""
    names = [fn for i, fn in CHECK_CALL.findall(_code(nb)) if i == ex.exercise_id]
    return list(dict.fromkeys([*names, ex.function]))


def student_id(path: Path, nb: nbformat.NotebookNode, given: str | None = None) -> str:
    """Whose cases: `given`, the notebook metadata dpsim.student, or folder/file name."""
    meta = nb.metadata.get("dpsim", {}) if isinstance(nb.metadata, dict) else {}
    from_meta = meta.get("student") if isinstance(meta, dict) else None
    if given:
        return given
    if isinstance(from_meta, str) and from_meta.strip():
        return from_meta.strip()
    resolved = path.resolve()
    return f"{resolved.parent.name}/{resolved.name}"


def parse_dump(text: str, marker: str) -> dict[str, bytes | str]:
    """Name -> dill bytes (or why not) from the dump cell's output; never unpickled here."""
    found: dict[str, bytes | str] = {}
    for line in text.splitlines():
        if not line.startswith(marker):
            continue
        try:
            raw = json.loads(line[len(marker):])
        except ValueError:
            continue
        for name, value in raw.items() if isinstance(raw, dict) else ():
            if isinstance(value, str):
                try:
                    found[name] = base64.b64decode(value, validate=True)
                except (ValueError, binascii.Error):
                    found[name] = "could not be read back from the kernel"
            elif isinstance(value, dict) and isinstance(value.get("error"), str):
                found[name] = value["error"][:1000]
    return found


class Grader:
    """One grading run: a verified copy of dpsim, a sandbox server, limits, the secret."""

    def __init__(self, limits: Limits | None = None, check_timeout_s: float = 120.0,
                 student: str | None = None) -> None:
        self.limits = limits or Limits()
        self.check_timeout_s = check_timeout_s
        self.student = student
        self.secret = os.environ.get(SECRET_VARIABLE, "")
        all_exercises()  # import every chapter module before any notebook runs
        self.copy = TrustedCopy()
        self.copy.redirect_package()
        self.env = {k: v for k, v in os.environ.items() if k != SECRET_VARIABLE}
        self.sandbox = Sandbox(lib=self.copy.root, memory_bytes=self.limits.memory_bytes,
                               env=self.env)
        self.sandbox.start()  # imports torch while the first notebook runs

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sandbox server and remove the copy; warn if dpsim's own source changed
        (this run used the files read at start; a later run would read the changed ones)."""
        self.sandbox.close()
        changed = self.copy.source_changes()
        if changed:
            print(f"grade: WARNING: dpsim's source changed while grading ({', '.join(changed[:5])}"
                  f"{' ...' if len(changed) > 5 else ''}); these grades used the files read at "
                  "start; restore the source before grading again")
        self.copy.close()

    def _kernel_env(self, lib: Path, token: str) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if not k.startswith("PYTHON")}
        env.update(PYTHONPATH=str(lib), PYTHONDONTWRITEBYTECODE="1", DPSIM_CHECK_SANDBOX="0")
        env[processes.TOKEN_VARIABLE] = token
        return env

    def collect(self, path: Path, nb: nbformat.NotebookNode, names: list[str],
                notes: list[str]) -> dict[str, bytes | str]:
        """Run the notebook in its own folder and kernel; the functions it defined."""
        tmp = Path(tempfile.mkdtemp(prefix="dpsim-grade-"))
        try:
            work = tmp / "work"
            work.mkdir()
            shutil.copyfile(path, work / path.name)
            lib = fresh_copy(self.copy.manifest, tmp)
            marker = f"__dpsim_functions_{secrets.token_hex(8)}__ "
            cells = [c.source for c in nb.cells if c.cell_type == "code"]
            text = run_notebook(cells, PRELUDE_CELL, DUMP_CELL.format(names=names,
                                                                      marker=marker),
                                work, self._kernel_env(lib, secrets.token_hex(12)),
                                self.limits, notes)
            return parse_dump(text, marker)
        finally:
            remove_tree(tmp)

    def _restore(self, notes: list[str]) -> None:
        changes = self.copy.verify()
        if changes:
            notes.append("the grader's copy of dpsim was changed and has been restored: "
                         + ", ".join(changes[:5]) + (" ..." if len(changes) > 5 else ""))

    def grade(self, path: Path) -> NotebookGrade:
        """Run one notebook and grade its exercises (see the module docstring)."""
        started = time.monotonic()
        grade = NotebookGrade(str(path))
        nb = nbformat.read(path, as_version=4)
        exercises = notebook_exercises(path, nb)
        if not exercises:
            grade.notes.append("no exercises found (no NN_ chapter prefix, "
                               "no check(\"N.M\", ...))")
            return grade
        plan = {ex.exercise_id: _candidate_names(ex, nb) for ex in exercises}
        found = self.collect(path, nb, sorted({n for ns in plan.values() for n in ns}),
                             grade.notes)
        seed = student_seed(student_id(path, nb, self.student), self.secret)
        for ex in exercises:
            grade.grades[ex.exercise_id] = self._grade_one(ex, plan[ex.exercise_id], found,
                                                           seed, grade.notes)
        grade.seconds = time.monotonic() - started
        return grade

    def _grade_one(self, ex: Exercise, names: list[str], found: dict[str, Any], seed: int,
                   notes: list[str]) -> ExerciseGrade:
        best: ExerciseGrade | None = None
        for name in names:
            blob = found.get(name)
            if not isinstance(blob, bytes):
                continue
            self._restore(notes)
            try:
                result = check_blob(ex.exercise_id, blob, self.sandbox, seed,
                                    self.check_timeout_s)
            except GraderError as exc:
                return ExerciseGrade(ex.exercise_id, 0, ex.points, str(exc), "error")
            eg = ExerciseGrade(ex.exercise_id, ex.points if result.ok else 0, ex.points,
                               None if result.ok else result.message,
                               "passed" if result.ok else "failed")
            if result.ok:
                return eg
            best = best or eg
        if best is not None:
            return best
        why = next((f"`{n}` {found[n]}" for n in names if n in found),
                   f"`{ex.function}` is not defined in the notebook")
        return ExerciseGrade(ex.exercise_id, 0, ex.points, why, "failed")


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                        for c, (cell, w) in enumerate(zip(r, widths, strict=True))))


def _report(grades: list[NotebookGrade]) -> None:
    for g in grades:
        for note in g.notes:
            print(f"\n{g.path}: {note}")
        for eg in g.grades.values():
            if eg.message:
                label = "grader error" if eg.outcome == "error" else f"0/{eg.max_points}"
                print(f"\n{g.path} {eg.exercise_id}: {label}\n  " +
                      eg.message.replace("\n", "\n  "))


def main(notebooks: list[str], csv_path: str | None = None, cell_timeout_s: float = 60.0,
         out_dir: str | None = None, output_format: str = "csv",
         notebook_timeout_s: float | None = None, memory_gib: float = 8.0,
         student: str | None = None) -> int:
    """Grade each notebook; print the table; write the CSV, feedback files and, with
    `output_format="gradescope"`, results.json. 0 if grading ran, 1 if a notebook is
    missing, 2 if the grader failed on some exercise."""
    from dpsim.sim.validation import require_choice, require_range

    require_choice("output_format", output_format, ["csv", "gradescope"])
    require_range("cell_timeout_s", cell_timeout_s, 1.0, 86400.0)
    require_range("memory_gib", memory_gib, 1.0, 4096.0)
    if output_format == "gradescope" and not out_dir:
        out_dir = "."
    limits = Limits(cell_timeout_s, notebook_timeout_s or 10 * cell_timeout_s,
                    int(memory_gib * 2**30))
    started = time.monotonic()
    missing = [p for p in notebooks if not Path(p).is_file()]
    for p in missing:
        print(f"grade: {p}: no such notebook")
    grades: list[NotebookGrade] = []
    with Grader(limits, student=student) as grader:
        for p in notebooks:
            if p not in missing:
                print(f"grading {p} ...", flush=True)
                grades.append(grader.grade(Path(p)))
    rows = results.score_table(grades)
    if grades:
        print()
        _print_table(rows)
        _report(grades)
    seconds = time.monotonic() - started
    if out_dir:
        folder = Path(out_dir)
        written = results.write_feedback(grades, folder / "feedback")
        results.write_csv(rows, folder / "grades.csv")
        print(f"\nwrote {folder / 'grades.csv'} and {len(written)} feedback file(s) in "
              f"{folder / 'feedback'}")
        if output_format == "gradescope":
            results.write_gradescope(grades, seconds, folder / "results.json")
            print(f"wrote {folder / 'results.json'}")
    if csv_path:
        results.write_csv(rows, Path(csv_path))
        print(f"\nwrote {csv_path}")
    print(f"\ngraded {len(grades)} notebook(s) in {seconds:.1f} s")
    if missing:
        return 1
    return 2 if any(g.errors for g in grades) else 0
