"""`python -m dpsim grade`'s body (`main`): the limits from the command's arguments, the
batch policy without the OS sandbox, the batch graded, the table printed, the files written
and the exit code.

Without bubblewrap (macOS, no namespaces) the notebooks run unboxed, as this user, so the
grader then grades one student's notebooks only, unless `--no-isolation` is given; a
Gradescope run (`--format gradescope`) grades one student's submission against the
assignment it names (`--exercises`). Every name printed is on one line
(`results.one_line`): a folder name can neither crash the log nor forge a line in it.
"""

from __future__ import annotations

import time
from pathlib import Path

from dpsim.course.grading import box, results
from dpsim.course.grading.grade.batch import grade_all
from dpsim.course.grading.grade.report import print_notes, print_table
from dpsim.course.grading.grade.submission import (
    Submission,
    assignment,
    common_folder,
    read_submission,
)
from dpsim.course.grading.kernel import Limits
from dpsim.course.grading.registry import Exercise


def _read_all(paths: list[Path], student: str | None) -> list[Submission]:
    """Each notebook read, its student bounded by the folder holding it below the
    notebooks' common folder (or `student`)."""
    subs = []
    root = common_folder(paths) if paths else Path(".")
    for path in paths:
        try:
            subs.append(read_submission(path, student, root))
        except OSError as exc:
            print(f"grade: {results.one_line(str(path))}: cannot be read: "
                  f"{results.one_line(str(exc))}")
    return subs


def _assignment(exercises: str | None,
                output_format: str) -> tuple[list[Exercise] | None, str | None]:
    """(the exercises that count, None for all; why the batch is refused, None if it is not)."""
    if exercises is not None:
        try:
            return assignment(exercises), None
        except ValueError as exc:
            return None, f"--exercises {results.one_line(exercises)}: {exc}"
    if output_format == "gradescope":
        return None, ("--format gradescope needs --exercises (the assignment's exercises, "
                      "such as 1 or 1.1,1.3): a submission's file name and check() calls are "
                      "the student's, so they cannot say what the assignment counts")
    return None, None


def _print_box(why: str | None, limits: Limits) -> None:
    """Say which sandbox and limits are in force (`why`: why there is no sandbox)."""
    if why is not None:
        print(f"grade: WARNING: no OS sandbox ({why}); the notebooks run as this user")
        return
    box_limits = box.BoxLimits(memory_bytes=limits.memory_bytes)
    for line in [box_limits.describe(), *box.hardening()]:
        print(f"grade: box: {line}")


def main(notebooks: list[str], csv_path: str | None = None, cell_timeout_s: float = 60.0,
         out_dir: str | None = None, output_format: str = "csv",
         notebook_timeout_s: float | None = None, memory_gib: float = 8.0,
         student: str | None = None, isolation: bool = True,
         visibility: str = "visible", exercises: str | None = None,
         slurm: str | None = None) -> int:
    """Grade each notebook; print the table; write the CSV, the feedback files and, with
    `output_format="gradescope"`, results.json. `exercises` names the assignment (`1`,
    `1.3`, `1,4.2`): only those count, and every one of them (Gradescope needs it). 0 if
    grading ran, 1 if a notebook is missing, 2 if the grader failed on some exercise or
    refused the batch. `slurm` (sbatch options, "" for none): grade as a Slurm job array,
    one task per student (`grade/slurm.py`), into the same files."""
    from dpsim.sim import require_choice, require_range

    require_choice("output_format", output_format, ["csv", "gradescope"])
    require_choice("visibility", visibility, list(results.VISIBILITIES))
    require_range("cell_timeout_s", cell_timeout_s, 1.0, 86400.0)
    require_range("memory_gib", memory_gib, 1.0, 4096.0)
    if notebook_timeout_s is not None:
        require_range("notebook_timeout_s", notebook_timeout_s, 1.0, 7 * 86400.0)
    only, refused = _assignment(exercises, output_format)
    if refused:
        print(f"grade: {refused}")
        return 2
    if output_format == "gradescope" and not out_dir:
        out_dir = "."
    limits = Limits(cell_timeout_s, notebook_timeout_s or 10 * cell_timeout_s,
                    int(memory_gib * 2**30))
    started = time.monotonic()
    missing = [p for p in notebooks if not Path(p).is_file() and not Path(p).is_symlink()]
    for p in missing:  # a link is not followed: read_submission refuses it
        print(f"grade: {results.one_line(p)}: no such notebook")
    subs = _read_all([Path(p) for p in notebooks if p not in missing], student)
    who = list(dict.fromkeys(s.student for s in subs))
    if output_format == "gradescope" and len(who) > 1:
        print(f"grade: --format gradescope grades one student's submission; these notebooks "
              f"are from {len(who)} students ({', '.join(map(results.one_line, who[:5]))})")
        return 2
    why = box.unavailable() if isolation else "--no-isolation was given"
    if why is not None and isolation and len(who) > 1:
        print(f"grade: refusing to grade {len(who)} students' notebooks in one batch "
              f"without the OS sandbox ({why}): one notebook could change another's "
              "grade. Grade each student in a container of its own (README, For "
              "instructors), or pass --no-isolation to accept that risk.")
        return 2
    _print_box(why, limits)
    if slurm is None:
        grades, crashed = grade_all(subs, limits, isolate=why is None, only=only)
    else:  # one array task per student, merged back in this batch's order
        from dpsim.course.grading.grade.slurm import grade_on_slurm

        grades, crashed = grade_on_slurm(subs, limits, why is None, exercises, slurm)
    students = results.by_student(grades)
    rows = results.score_table(students)
    if students:
        print()
        print_table(rows)
        print_notes(students)
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
        print(f"\nwrote {results.one_line(csv_path)}")
    for problem in problems:
        print(f"grade: ERROR: {problem}")
    print(f"\ngraded {len(grades)} notebook(s) of {len(students)} student(s) in "
          f"{seconds:.1f} s")
    if missing:
        return 1
    return 2 if crashed or problems or any(s.errors for s in students) else 0
