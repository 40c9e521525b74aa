"""Grade student notebooks without trusting anything they print or patch.

For each notebook: run it in a fresh kernel (errors allowed, a per-cell time limit; a cell
that runs past it is interrupted and grading goes on with what got defined), then have
the kernel `dill`-pickle the learner's functions into a temporary file, and run the
grader's own checks on them in a separate process with a time limit. That process is
forked from a server that has only imported torch and the checks, so no learner code
has run in it before (see `dpsim.course.grading.clean_process`).
A notebook's exercises are its chapter's (from a file name like `01_...`) plus every
`check("N.M", ...)` found in its code. Points are all-or-nothing per exercise.

Limits: the notebook runs with the grader's user rights, so a notebook could tamper with
files (the grader stops if the files of dpsim.course.grading change), and a learner
function that attacks the checking process itself is out of scope; grade untrusted work
in a disposable container.
"""

from __future__ import annotations

import csv
import hashlib
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from dpsim.course.exercises import CHECK_CALL
from dpsim.course.grading.clean_process import CheckServer
from dpsim.course.grading.core import Exercise, all_exercises, chapter_exercises, get_exercise

NOTEBOOK_CELLS_BUDGET = 10  # a notebook may run for at most this many cell timeouts

# Run first in the student's kernel: check() there would only cost time, since nothing the
# kernel prints counts; the real checks run later in a clean process.
PRELUDE_CELL = '''\
try:
    import dpsim.course.grading as __g, dpsim.course.grading.core as __c
    __g.check = __c.check = lambda *args, **kwargs: None
    del __g, __c
except Exception:
    pass
'''
DUMP_CELL = '''\
def __dpsim_grader_dump(names, path):
    import builtins, pickle
    import dill
    found = {{}}
    for name in names:
        if name in globals():
            try:
                found[name] = dill.dumps(globals()[name], recurse=True)
            except Exception as exc:
                found[name] = f"could not be pickled: {{type(exc).__name__}}: {{exc}}"
    with builtins.open(path, "wb") as f:
        pickle.dump(found, f)
__dpsim_grader_dump({names!r}, {path!r})
del __dpsim_grader_dump
'''


@dataclass(frozen=True)
class ExerciseGrade:
    """Points one notebook earned on one exercise, and why."""

    exercise_id: str
    points: int
    max_points: int
    message: str | None = None  # None when passed


@dataclass
class NotebookGrade:
    """All grades of one notebook, with notes on how its run went."""

    path: str
    grades: dict[str, ExerciseGrade] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def points(self) -> int:
        """Points earned."""
        return sum(g.points for g in self.grades.values())

    @property
    def max_points(self) -> int:
        """Points available."""
        return sum(g.max_points for g in self.grades.values())


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
    names = [ex.function]
    names += [fn for i, fn in CHECK_CALL.findall(_code(nb)) if i == ex.exercise_id]
    return list(dict.fromkeys(names))


def _fingerprint(exercises: list[Exercise]) -> str:
    """Hash of the source files that check these exercises."""
    root = Path(__file__).resolve().parent
    files = {root / "grader.py"}
    files |= {p for p in (root / "grading").glob("*.py") if not re.fullmatch(r"ch\d+\.py", p.name)}
    files |= {Path(sys.modules[ex.make_cases.__module__].__file__ or "") for ex in exercises}
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def run_notebook(path: Path, nb: nbformat.NotebookNode, dump_cell: str,
                 cell_timeout_s: float, notes: list[str]) -> None:
    """Execute the notebook's code cells, then `dump_cell`, in one fresh kernel."""
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    client = NotebookClient(nb, timeout=max(1, round(cell_timeout_s)), kernel_name="python3",
                            allow_errors=True, interrupt_on_timeout=True, record_timing=False,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    client.reset_execution_trackers()
    n_cells = len(nb.cells)
    nb.cells += [nbformat.v4.new_code_cell(dump_cell), nbformat.v4.new_code_cell(PRELUDE_CELL)]
    budget_s = NOTEBOOK_CELLS_BUDGET * cell_timeout_s
    started = time.monotonic()
    with client.setup_kernel():
        client.execute_cell(nb.cells[n_cells + 1], n_cells + 1)
        for index, cell in enumerate(nb.cells[:n_cells]):
            if cell.cell_type != "code":
                continue
            if time.monotonic() - started > budget_s:
                notes.append(f"the notebook ran past {budget_s:g} s; cells from {index} on "
                             "were skipped")
                break
            start = time.monotonic()
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                notes.append(f"the kernel died in cell {index}")
                return
            if time.monotonic() - start >= cell_timeout_s:
                notes.append(f"cell {index} was stopped after {cell_timeout_s:g} s")
        try:
            client.execute_cell(nb.cells[n_cells], n_cells)
        except DeadKernelError:
            notes.append("the kernel died before the functions could be collected")


def grade_notebook(path: Path, cell_timeout_s: float,
                   server: CheckServer | None = None) -> NotebookGrade:
    """Execute one notebook and grade its exercises in a clean process (see CheckServer)."""
    grade = NotebookGrade(str(path))
    nb = nbformat.read(path, as_version=4)
    exercises = notebook_exercises(path, nb)
    if not exercises:
        grade.notes.append("no exercises found (no NN_ chapter prefix, no check(\"N.M\", ...))")
        return grade
    plan = {ex.exercise_id: _candidate_names(ex, nb) for ex in exercises}
    names = sorted({n for ns in plan.values() for n in ns})
    before = _fingerprint(exercises)
    with tempfile.TemporaryDirectory(prefix="dpsim-grade-") as tmp:
        workdir = Path(tmp)
        dump_path = workdir / "functions.pkl"
        run_notebook(path, nb, DUMP_CELL.format(names=names, path=str(dump_path)),
                     cell_timeout_s, grade.notes)
        if _fingerprint(exercises) != before:
            raise RuntimeError(f"{path} changed the grader's files (dpsim/grading) while it "
                               "ran; grading stopped (restore them before grading again)")
        if not dump_path.exists():
            grade.notes.append("the learner's functions could not be collected from the kernel")
        results_dir = Path(tempfile.mkdtemp(dir=tmp))  # made after the kernel has stopped
        if server is None:
            with CheckServer() as own:
                results, err = own.check(dump_path, plan, results_dir, cell_timeout_s)
        else:
            results, err = server.check(dump_path, plan, results_dir, cell_timeout_s)
    for ex in exercises:
        row = results.get(ex.exercise_id)
        if row is None:
            message = "not checked: the checking process ended early" + (
                f" ({err.strip().splitlines()[-1]})" if err.strip() else "")
            grade.grades[ex.exercise_id] = ExerciseGrade(ex.exercise_id, 0, ex.points, message)
            continue
        ok = row.get("message") is None and row["passed"] == row["total"] > 0
        grade.grades[ex.exercise_id] = ExerciseGrade(
            ex.exercise_id, ex.points if ok else 0, ex.points, None if ok else row["message"])
    return grade


def score_table(grades: list[NotebookGrade]) -> list[list[str]]:
    """Rows of [notebook, points per exercise..., total, max]; the first row is the header."""
    ids = sorted({i for g in grades for i in g.grades}, key=lambda i: tuple(map(int, i.split("."))))
    rows = [["notebook", *ids, "total", "max"]]
    for g in grades:
        cells = [str(g.grades[i].points) if i in g.grades else "" for i in ids]
        rows.append([g.path, *cells, str(g.points), str(g.max_points)])
    return rows


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                        for c, (cell, w) in enumerate(zip(r, widths, strict=True))))


def main(notebooks: list[str], csv_path: str | None = None, cell_timeout_s: float = 60.0) -> int:
    """Grade each notebook, print the score table (and write it as CSV); 0 if grading ran."""
    grades: list[NotebookGrade] = []
    missing = [p for p in notebooks if not Path(p).is_file()]
    for p in missing:
        print(f"grade: {p}: no such notebook")
    with CheckServer() as server:
        for p in notebooks:
            if p in missing:
                continue
            print(f"grading {p} ...", flush=True)
            try:
                grades.append(grade_notebook(Path(p), cell_timeout_s, server))
            except RuntimeError as exc:
                print(f"grade: {exc}")
                return 1
    if grades:
        rows = score_table(grades)
        print()
        _print_table(rows)
        for g in grades:
            for note in g.notes:
                print(f"\n{g.path}: {note}")
            for eg in g.grades.values():
                if eg.message:
                    print(f"\n{g.path} {eg.exercise_id}: 0/{eg.max_points}\n  " +
                          eg.message.replace("\n", "\n  "))
        if csv_path:
            with open(csv_path, "w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerows(rows)
            print(f"\nwrote {csv_path}")
    return 1 if missing else 0
