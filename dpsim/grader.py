"""Grade student notebooks without trusting anything they print or patch.

For each notebook: run it in a fresh kernel (errors allowed, a per-cell time limit; a cell
that runs past it is interrupted and grading goes on with what got defined), then have
the kernel `dill`-pickle the learner's functions into a temporary file, and run the
grader's own checks on them in a separate, clean Python process with a time limit.
A notebook's exercises are its chapter's (from a file name like `01_...`) plus every
`check("N.M", ...)` found in its code. Points are all-or-nothing per exercise.

Limits: the notebook runs with the grader's user rights, so a notebook could tamper with
files (the grader stops if the files of dpsim.grading change), and a learner
function that attacks the checking process itself is out of scope; grade untrusted work
in a disposable container.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from dpsim.exercises import CHECK_CALL
from dpsim.grading.core import Exercise, all_exercises, chapter_exercises, get_exercise

WORKER = "import sys; from dpsim.grader import worker_main; sys.exit(worker_main(sys.argv[1:]))"
IMPORT_ALLOWANCE_S = 60.0  # start-up of the clean process (python + torch import)

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


def _fingerprint() -> str:
    """Hash of the grading source files (the checks that the clean process runs)."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([root / "grader.py", *root.glob("grading/*.py")]):
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
    timeouts = 0
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(dump_cell))
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells[:n_cells]):
            if cell.cell_type != "code":
                continue
            start = time.monotonic()
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                notes.append(f"the kernel died in cell {index}")
                return
            if time.monotonic() - start >= cell_timeout_s:
                timeouts += 1
                notes.append(f"cell {index} was stopped after {cell_timeout_s:g} s")
                if timeouts >= 2:
                    notes.append("the kernel stays busy; the remaining cells were skipped")
                    break
        try:
            client.execute_cell(nb.cells[n_cells], n_cells)
        except DeadKernelError:
            notes.append("the kernel died before the functions could be collected")


def check_in_clean_process(dump_path: Path, plan: dict[str, list[str]], workdir: Path,
                           timeout_s: float) -> tuple[dict[str, dict[str, Any]], str]:
    """Run the registered checks on the pickled functions in a new python process.

    Returns exercise id -> {"passed", "total", "message"} for the exercises it finished,
    and the tail of the process's stderr.
    """
    out_path = workdir / "results.jsonl"
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + ([env["PYTHONPATH"]]
                                                            if env.get("PYTHONPATH") else []))
    argv = [sys.executable, "-c", WORKER, str(dump_path), json.dumps(plan), str(out_path),
            str(timeout_s)]
    total_s = timeout_s * max(1, len(plan)) + IMPORT_ALLOWANCE_S
    err = ""
    try:
        proc = subprocess.run(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              timeout=total_s, check=False)
        err = proc.stderr.decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired:
        err = f"the checking process was stopped after {total_s:g} s"
    results: dict[str, dict[str, Any]] = {}
    if out_path.exists():
        for line in out_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                results[row["id"]] = row
            except (ValueError, KeyError):
                continue
    return results, err


class _CheckTimeout(BaseException):
    """Raised by SIGALRM in the clean process when one exercise runs too long."""


def worker_main(argv: list[str]) -> int:
    """Entry point of the clean process: dump file, plan (JSON), results file, seconds."""
    import dill

    from dpsim.grading.core import run_check

    dump_path, plan_json, out_path, timeout_arg = argv
    plan: dict[str, list[str]] = json.loads(plan_json)
    timeout_s = float(timeout_arg)
    all_exercises()  # import every chapter before any learner code runs
    found: dict[str, Any] = {}
    if Path(dump_path).exists():
        with open(dump_path, "rb") as f:
            found = pickle.load(f)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _CheckTimeout

    can_alarm = hasattr(signal, "setitimer")
    if can_alarm:
        signal.signal(signal.SIGALRM, on_alarm)
    with open(out_path, "a", encoding="utf-8") as out:
        for exercise_id, names in plan.items():
            row: dict[str, Any] = {"id": exercise_id, "passed": 0, "total": 0}
            blob = next((found[n] for n in names if isinstance(found.get(n), bytes)), None)
            if blob is None:
                why = next((f"`{n}` {found[n]}" for n in names if n in found), None)
                row["message"] = why or f"`{names[0]}` is not defined in the notebook"
            else:
                try:
                    if can_alarm:
                        signal.setitimer(signal.ITIMER_REAL, timeout_s)
                    result = run_check(exercise_id, dill.loads(blob))
                    row.update(passed=result.passed, total=result.total,
                               message=result.message)
                except _CheckTimeout:
                    row["message"] = f"the check took longer than {timeout_s:g} s"
                except BaseException as exc:  # learner code may raise anything, even SystemExit
                    row["message"] = f"checking stopped: {type(exc).__name__}: {exc}"
                finally:
                    if can_alarm:
                        signal.setitimer(signal.ITIMER_REAL, 0)
            out.write(json.dumps(row) + "\n")
            out.flush()
    return 0


def grade_notebook(path: Path, cell_timeout_s: float) -> NotebookGrade:
    """Execute one notebook and grade its exercises in a clean process."""
    grade = NotebookGrade(str(path))
    nb = nbformat.read(path, as_version=4)
    exercises = notebook_exercises(path, nb)
    if not exercises:
        grade.notes.append("no exercises found (no NN_ chapter prefix, no check(\"N.M\", ...))")
        return grade
    plan = {ex.exercise_id: _candidate_names(ex, nb) for ex in exercises}
    names = sorted({n for ns in plan.values() for n in ns})
    before = _fingerprint()
    with tempfile.TemporaryDirectory(prefix="dpsim-grade-") as tmp:
        workdir = Path(tmp)
        dump_path = workdir / "functions.pkl"
        run_notebook(path, nb, DUMP_CELL.format(names=names, path=str(dump_path)),
                     cell_timeout_s, grade.notes)
        if _fingerprint() != before:
            raise RuntimeError(f"{path} changed the grader's files (dpsim/grading) while it "
                               "ran; grading stopped (restore them before grading again)")
        if not dump_path.exists():
            grade.notes.append("the learner's functions could not be collected from the kernel")
        results, err = check_in_clean_process(dump_path, plan, workdir, cell_timeout_s)
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
    for p in notebooks:
        if p in missing:
            continue
        print(f"grading {p} ...", flush=True)
        try:
            grades.append(grade_notebook(Path(p), cell_timeout_s))
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
