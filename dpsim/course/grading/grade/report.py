"""What the grader prints for the instructor: the score table, then each student's notes and
the message of every exercise not passed.

Learner-made text (a note, a failure message) is printed stripped of control characters
and behind `  | ` on every line, a name (a student id, a path) on one line with its control
characters escaped, so that nothing a notebook makes the grader print
can pass for the grader's own lines. The files written (CSV, feedback, results.json) are
`grading.results`'s.
"""

from __future__ import annotations

from dpsim.course.grading import results


def print_table(rows: list[list[str]]) -> None:
    """The rows as aligned columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                        for c, (cell, w) in enumerate(zip(r, widths, strict=True))))


def quoted(text: str) -> str:
    """Learner-made text for the log: no control characters, every line behind `  | `, so
    that nothing a notebook makes the grader print can pass for the grader's own line."""
    return "  | " + results.printable(text).replace("\n", "\n  | ")


def print_notes(students: list[results.StudentGrade]) -> None:
    """Each student's notes and the message of every exercise that lost points."""
    for s in students:
        who = results.one_line(s.student)
        for note in s.notes:
            print(f"\n{who}: note\n{quoted(note)}")
        for eg in s.grades.values():
            if eg.message:
                label = "grader error" if eg.outcome == "error" else f"0/{eg.max_points}"
                print(f"\n{who} {eg.exercise_id}: {label}\n{quoted(eg.message)}")
