"""A batch of submissions graded in one `Grader` run: each notebook once, one grader failure
costing only its own notebook (and counted as a grader error in its student's row), and
identical files from different students named. Names reach the log on one line
(`results.one_line`).
"""

from __future__ import annotations

from dpsim.course.grading import results
from dpsim.course.grading.grade.grader import Grader
from dpsim.course.grading.grade.submission import Submission
from dpsim.course.grading.kernel import Limits
from dpsim.course.grading.registry import Exercise
from dpsim.course.grading.results import NotebookGrade


def grade_all(subs: list[Submission], limits: Limits, isolate: bool,
              only: list[Exercise] | None = None) -> tuple[list[NotebookGrade], int]:
    """Grade every submission once (an identical notebook of the same student is counted
    once; `only`: the assignment's exercises); (the grades, how many notebooks the grader
    itself failed on)."""
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
            print(f"grading {results.one_line(str(sub.path))} ...", flush=True)
            try:
                grades.append(grader.grade(sub, only))
            except Exception as exc:  # the grader's own failure: this notebook only
                crashed += 1
                grades.append(NotebookGrade(str(sub.path), student=sub.student,
                                            digest=sub.digest, failed_runs=1,
                                            notes=[f"grader error: {type(exc).__name__}: "
                                                   f"{str(exc)[:500]}"]))
    for digest, names in owners.items():
        if len(names) > 1:
            print(f"grade: identical notebooks (sha256 {digest[:12]}) from "
                  f"{len(names)} students: {', '.join(sorted(map(results.one_line, names)))}")
    return grades, crashed
