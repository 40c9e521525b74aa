"""Grade student notebooks without trusting anything they print, patch or leave behind.

Per notebook, on Linux with bubblewrap (`grading.box`), everything of the notebook runs in
OS boxes of its own, as an unprivileged user with no network, seeing only a read-only copy
of dpsim, Python and an empty working folder:

1. the notebook box: a fresh kernel runs the code cells under time and memory limits
   (`grading.kernel`, driven from inside by `grading.notebook_job`), then prints the
   learner's functions as dill bytes (base64 in JSON);
2. the check box, started at the same time: a sandbox server (`grading.sandbox`) that runs
   those functions on each exercise's case inputs and sends back plain data.

This process never unpickles the learner's bytes, builds each exercise's cases itself,
with the student's own seed, and compares the answers here (`grading.compare`); the
expected values never enter a box. Both boxes are killed, with every process in them,
before the next notebook starts, and the reports are written once, after the last one.
Without bubblewrap (macOS, no namespaces) the same processes run unboxed, as this user;
the grader then grades one student's notebooks only, unless `--no-isolation` is given.

A notebook's exercises are its chapter's (file name `NN_...`) plus every
`check("N.M", name)` in its code; each is tried under its own name and every name passed
to check() for it, and the best result counts; every check's time counts against the
notebook's limit. Points are all-or-nothing per exercise. The student id (whose seed picks
the cases) is `--student`, else the notebook metadata `dpsim.student`, else the notebook's
folder and file name (`alice/01_single_device.ipynb`); `DPSIM_GRADING_SECRET` in the
grader's environment is mixed in and never passed on. See README "For instructors" for
what is and is not covered.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import re
import secrets
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nbformat

from dpsim.course.build import CHECK_CALL
from dpsim.course.grading import box, processes, results
from dpsim.course.grading.core import GraderError, check_blob
from dpsim.course.grading.kernel import MAX_DUMP_CHARS, Limits, run_notebook
from dpsim.course.grading.notebook_job import RESULT_MARKER
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
    from dpsim.runtime.launch.pickling import dumps
    found = {{}}
    for name in names:
        if name in globals():
            try:
                found[name] = base64.b64encode(dumps(globals()[name])).decode()
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


PASSED_ENV = ("LANG", "LANGUAGE", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "DPSIM_START_METHOD")  # the only variables a box gets from this environment
_JOB_BOOT = ("import sys; sys.path[:0] = [{lib!r}]; "
             "from dpsim.course.grading.notebook_job import main; main()")
MAX_JOB_BYTES = 3 * MAX_DUMP_CHARS  # what the notebook box may print: the dump, base64'd
START_ALLOWANCE_S = 180.0  # a kernel starting and the dump cell, beyond the notebook's cells


@dataclass(frozen=True)
class Submission:
    """One notebook to grade: its path, content (None if unreadable), student, digest."""

    path: Path
    nb: nbformat.NotebookNode | None
    student: str
    digest: str
    problem: str = ""  # why the notebook could not be read


def read_submission(path: Path, student: str | None = None) -> Submission:
    """Read one notebook (never raises for a malformed file: `problem` says why)."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # malformed JSON, wrong encoding, not a notebook
        empty = nbformat.v4.new_notebook()
        return Submission(path, None, student_id(path, empty, student), digest,
                          f"the notebook could not be read: {type(exc).__name__}: "
                          f"{str(exc)[:300]}")
    return Submission(path, nb, student_id(path, nb, student), digest)


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

    def _sandbox(self) -> Sandbox:
        """This notebook's own checking process (in its own box when isolated)."""
        if not self.isolate:
            return Sandbox(lib=self.copy.root, memory_bytes=self.limits.memory_bytes,
                           env=self.env)
        root, limits = self.copy.root, self.box_limits

        def wrap(argv: list[str], env: dict[str, str]) -> list[str]:
            return box.command(argv, root, env, limits)

        return Sandbox(lib=Path(box.BOX_LIB), memory_bytes=self.limits.memory_bytes,
                       env=self._box_env(), wrap=wrap, preexec=box.rlimits(limits))

    def collect(self, nb: nbformat.NotebookNode, names: list[str], notes: list[str]
                ) -> dict[str, bytes | str]:
        """Run the notebook in its own kernel (in its own box when isolated); the functions
        it defined."""
        marker = f"__dpsim_functions_{secrets.token_hex(8)}__ "
        cells = [c.source for c in nb.cells if c.cell_type == "code"]
        dump = DUMP_CELL.format(names=names, marker=marker)
        token = secrets.token_hex(12)
        if self.isolate:
            text = self._run_boxed(cells, dump, token, notes)
        else:
            text = self._run_unboxed(cells, dump, token, notes)
        return parse_dump(text, marker)

    def _run_unboxed(self, cells: list[str], dump: str, token: str, notes: list[str]) -> str:
        tmp = Path(tempfile.mkdtemp(prefix="dpsim-grade-"))
        try:
            work = tmp / "work"
            work.mkdir()
            lib = fresh_copy(self.copy.manifest, tmp)
            env = {k: v for k, v in self.env.items() if not k.startswith("PYTHON")}
            env.update(PYTHONPATH=str(lib), PYTHONDONTWRITEBYTECODE="1",
                       DPSIM_CHECK_SANDBOX="0")
            env[processes.TOKEN_VARIABLE] = token
            return run_notebook(cells, PRELUDE_CELL, dump, work, env, self.limits, notes)
        finally:
            remove_tree(tmp)

    def _run_boxed(self, cells: list[str], dump: str, token: str, notes: list[str]) -> str:
        env = {**self._box_env(), "PYTHONPATH": box.BOX_LIB, "DPSIM_CHECK_SANDBOX": "0",
               processes.TOKEN_VARIABLE: token}
        request = json.dumps({"cells": cells, "prelude": PRELUDE_CELL, "dump": dump,
                              "env": env, "limits": asdict(self.limits)}).encode()
        argv = [sys.executable, "-I", "-B", "-c", _JOB_BOOT.format(lib=box.BOX_LIB)]
        allowed_s = self.limits.notebook_timeout_s + START_ALLOWANCE_S
        proc = subprocess.Popen(box.command(argv, self.copy.root, env, self.box_limits),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env={"PATH": os.defpath},
                                start_new_session=True, preexec_fn=box.rlimits(self.box_limits))
        try:
            out, ended = _exchange(proc, request, time.monotonic() + allowed_s, MAX_JOB_BYTES)
        finally:
            processes.kill_all(proc.pid, token)
            proc.wait()
        if ended:
            notes.append(ended)
        for line in reversed(out.splitlines()):
            if line.startswith(RESULT_MARKER.encode()):
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    raw = json.loads(line[len(RESULT_MARKER):])
                    if isinstance(raw, dict) and isinstance(raw.get("text"), str):
                        got = raw.get("notes")
                        notes += [n[:1000] for n in got[:50] if isinstance(n, str)] \
                            if isinstance(got, list) else []
                        return str(raw["text"])
        notes.append("the notebook's run ended without giving back its functions")
        return ""

    def _restore(self, notes: list[str]) -> None:
        changes = self.copy.verify()
        if changes:
            notes.append("the grader's copy of dpsim was changed and has been restored: "
                         + ", ".join(changes[:5]) + (" ..." if len(changes) > 5 else ""))

    def grade(self, sub: Submission) -> NotebookGrade:
        """Run one notebook and grade its exercises (see the module docstring)."""
        started = time.monotonic()
        deadline = started + self.limits.notebook_timeout_s
        grade = NotebookGrade(str(sub.path), student=sub.student, digest=sub.digest)
        if sub.nb is None:
            for ex in notebook_exercises(sub.path, nbformat.v4.new_notebook()):
                grade.grades[ex.exercise_id] = ExerciseGrade(
                    ex.exercise_id, 0, ex.points, sub.problem, "failed", ex.title)
            grade.notes.append(sub.problem)
            return grade
        nb = sub.nb
        exercises = notebook_exercises(sub.path, nb)
        if not exercises:
            grade.notes.append("no exercises found (no NN_ chapter prefix, "
                               "no check(\"N.M\", ...))")
            return grade
        plan = {ex.exercise_id: _candidate_names(ex, nb) for ex in exercises}
        sandbox = self._sandbox()
        sandbox.start()  # imports torch while the notebook runs
        try:
            found = self.collect(nb, sorted({n for ns in plan.values() for n in ns}),
                                 grade.notes)
            seed = student_seed(sub.student, self.secret)
            for ex in exercises:
                grade.grades[ex.exercise_id] = self._grade_one(
                    ex, plan[ex.exercise_id], found, seed, grade.notes, sandbox, deadline)
        finally:
            sandbox.close()
        grade.seconds = time.monotonic() - started
        return grade

    def _grade_one(self, ex: Exercise, names: list[str], found: dict[str, Any], seed: int,
                   notes: list[str], sandbox: Sandbox, deadline: float) -> ExerciseGrade:
        best: ExerciseGrade | None = None
        for name in names:
            blob = found.get(name)
            if not isinstance(blob, bytes):
                continue
            left = deadline - time.monotonic()
            if left < 1.0:
                return best or ExerciseGrade(
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
            eg = ExerciseGrade(ex.exercise_id, ex.points if result.ok else 0, ex.points,
                               None if result.ok else result.message,
                               "passed" if result.ok else "failed", ex.title)
            if result.ok:
                return eg
            best = best or eg
        if best is not None:
            return best
        why = next((f"`{n}` {found[n]}" for n in names if n in found),
                   f"`{ex.function}` is not defined in the notebook")
        return ExerciseGrade(ex.exercise_id, 0, ex.points, why, "failed", ex.title)


def _exchange(proc: subprocess.Popen[bytes], request: bytes, deadline: float, cap: int
              ) -> tuple[bytes, str]:
    """Send `request` to `proc`'s stdin and read its stdout until it ends, `deadline`
    (monotonic seconds) or `cap` bytes; (what it printed, why it was cut short or '')."""
    assert proc.stdin is not None and proc.stdout is not None

    def feed() -> None:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.write(request)
            proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    fd, size = proc.stdout.fileno(), 0
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), "the notebook's run was stopped at its time limit"
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), ""
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            return b"".join(chunks), "the notebook's run printed too much; it was stopped"


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                        for c, (cell, w) in enumerate(zip(r, widths, strict=True))))


def _quoted(text: str) -> str:
    """Learner-made text for the log: no control characters, every line behind `  | `, so
    that nothing a notebook makes the grader print can pass for the grader's own line."""
    return "  | " + results.printable(text).replace("\n", "\n  | ")


def _report(students: list[results.StudentGrade]) -> None:
    for s in students:
        who = results.printable(s.student)
        for note in s.notes:
            print(f"\n{who}: note\n{_quoted(note)}")
        for eg in s.grades.values():
            if eg.message:
                label = "grader error" if eg.outcome == "error" else f"0/{eg.max_points}"
                print(f"\n{who} {eg.exercise_id}: {label}\n{_quoted(eg.message)}")


def _read_all(paths: list[Path], student: str | None) -> list[Submission]:
    subs = []
    for path in paths:
        try:
            subs.append(read_submission(path, student))
        except OSError as exc:
            print(f"grade: {path}: cannot be read: {exc}")
    return subs


def main(notebooks: list[str], csv_path: str | None = None, cell_timeout_s: float = 60.0,
         out_dir: str | None = None, output_format: str = "csv",
         notebook_timeout_s: float | None = None, memory_gib: float = 8.0,
         student: str | None = None, isolation: bool = True,
         visibility: str = "visible") -> int:
    """Grade each notebook; print the table; write the CSV, the feedback files and, with
    `output_format="gradescope"`, results.json. 0 if grading ran, 1 if a notebook is
    missing, 2 if the grader failed on some exercise or refused the batch."""
    from dpsim.sim.checks import require_choice, require_range

    require_choice("output_format", output_format, ["csv", "gradescope"])
    require_choice("visibility", visibility, list(results.VISIBILITIES))
    require_range("cell_timeout_s", cell_timeout_s, 1.0, 86400.0)
    require_range("memory_gib", memory_gib, 1.0, 4096.0)
    if notebook_timeout_s is not None:
        require_range("notebook_timeout_s", notebook_timeout_s, 1.0, 7 * 86400.0)
    if output_format == "gradescope" and not out_dir:
        out_dir = "."
    limits = Limits(cell_timeout_s, notebook_timeout_s or 10 * cell_timeout_s,
                    int(memory_gib * 2**30))
    started = time.monotonic()
    missing = [p for p in notebooks if not Path(p).is_file()]
    for p in missing:
        print(f"grade: {p}: no such notebook")
    subs = _read_all([Path(p) for p in notebooks if p not in missing], student)
    who = list(dict.fromkeys(s.student for s in subs))
    if output_format == "gradescope" and len(who) > 1:
        print(f"grade: --format gradescope grades one student's submission; these notebooks "
              f"are from {len(who)} students ({', '.join(map(results.printable, who[:5]))})")
        return 2
    why = box.unavailable() if isolation else "--no-isolation was given"
    if why is not None:
        if isolation and len(who) > 1:
            print(f"grade: refusing to grade {len(who)} students' notebooks in one batch "
                  f"without the OS sandbox ({why}): one notebook could change another's "
                  "grade. Grade each student in a container of its own (README, For "
                  "instructors), or pass --no-isolation to accept that risk.")
            return 2
        print(f"grade: WARNING: no OS sandbox ({why}); the notebooks run as this user")
    grades, crashed = _grade_all(subs, limits, isolate=why is None)
    students = results.by_student(grades)
    rows = results.score_table(students)
    if students:
        print()
        _print_table(rows)
        _report(students)
    seconds = time.monotonic() - started
    problems: list[str] = []
    if out_dir:
        folder = Path(out_dir)
        written, problems = results.write_reports(students, folder, seconds, output_format,
                                                  visibility)
        print(f"\nwrote {len(written)} file(s) in {folder}: grades.csv, "
              f"feedback/ (one file per student)"
              + (", results.json" if output_format == "gradescope" else ""))
    if csv_path:
        problems += filter(None, [results.write_checked(Path(csv_path),
                                                        results.csv_text(rows))])
        print(f"\nwrote {csv_path}")
    for problem in problems:
        print(f"grade: ERROR: {problem}")
    print(f"\ngraded {len(grades)} notebook(s) of {len(students)} student(s) in "
          f"{seconds:.1f} s")
    if missing:
        return 1
    return 2 if crashed or problems or any(s.errors for s in students) else 0


def _grade_all(subs: list[Submission], limits: Limits, isolate: bool
               ) -> tuple[list[NotebookGrade], int]:
    """Grade every submission once (an identical notebook of the same student is counted
    once); (the grades, how many notebooks the grader itself failed on)."""
    grades: list[NotebookGrade] = []
    seen: dict[tuple[str, str], str] = {}
    owners: dict[str, set[str]] = {}
    crashed = 0
    with Grader(limits, isolate=isolate) as grader:
        for sub in subs:
            owners.setdefault(sub.digest, set()).add(sub.student)
            first = seen.setdefault((sub.student, sub.digest), str(sub.path))
            if first != str(sub.path):
                grades.append(NotebookGrade(str(sub.path), student=sub.student,
                                            digest=sub.digest,
                                            notes=[f"the same file as {first}: counted once"]))
                continue
            print(f"grading {sub.path} ...", flush=True)
            try:
                grades.append(grader.grade(sub))
            except Exception as exc:  # the grader's own failure: this notebook only
                crashed += 1
                grades.append(NotebookGrade(str(sub.path), student=sub.student,
                                            digest=sub.digest,
                                            notes=[f"grader error: {type(exc).__name__}: "
                                                   f"{str(exc)[:500]}"]))
    for digest, names in owners.items():
        if len(names) > 1:
            print(f"grade: identical notebooks (sha256 {digest[:12]}) from "
                  f"{len(names)} students: {', '.join(sorted(map(results.printable, names)))}")
    return grades, crashed
