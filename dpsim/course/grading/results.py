"""Grades and how they are written: one report per student and exercise, as a score table
(CSV), one feedback file per student, and a Gradescope results.json.

An exercise is `passed` (full points), `failed` (0 points, with the message the learner
sees) or `error`: the grader itself failed on it (building the cases, comparing, the
checking process ended). An error scores 0 of its points, so that a learner who breaks
their own checks gains nothing, and is marked `error` in every report (and the grader's
exit code) for the instructor to look at. A student's notebooks are merged: each exercise
counts once, with its best result (passed, then error, then failed); a notebook whose
bytes equal one already graded for the same student is not graded again.

Everything written is first built in memory, written once, and read back (`write_checked`):
a file that differs from what was written is reported, not trusted.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

STATUSES = ("passed", "failed", "error")
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
_RANK = {"passed": 0, "error": 1, "failed": 2}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may read as a formula


@dataclass(frozen=True)
class ExerciseGrade:
    """Points one notebook earned on one exercise, and why."""

    exercise_id: str
    points: int
    max_points: int
    message: str | None = None  # None when passed
    status: str = ""  # passed | failed | error ("" : passed if points, else failed)
    title: str = ""

    @property
    def outcome(self) -> str:
        """passed, failed or error."""
        return self.status or ("passed" if self.message is None else "failed")


class Totals:
    """Points, maximum and grader errors over `grades` (a notebook's or a student's)."""

    grades: dict[str, ExerciseGrade]
    failed_runs: int  # notebooks the grader itself failed on (no exercise judged)

    @property
    def points(self) -> int:
        """Points earned."""
        return sum(g.points for g in self.grades.values())

    @property
    def max_points(self) -> int:
        """Points available (grader errors included: they score 0 and are flagged)."""
        return sum(g.max_points for g in self.grades.values())

    @property
    def errors(self) -> int:
        """Exercises the grader failed on, and notebooks it failed on as a whole."""
        return sum(g.outcome == "error" for g in self.grades.values()) + self.failed_runs


@dataclass
class NotebookGrade(Totals):
    """All grades of one notebook, with notes on how its run went."""

    path: str
    grades: dict[str, ExerciseGrade] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    student: str = ""  # whose notebook ("" : the path)
    digest: str = ""  # sha256 of the notebook's bytes
    failed_runs: int = 0  # 1 when the grader itself failed on this notebook


@dataclass
class StudentGrade(Totals):
    """One student's grades over all their notebooks: each exercise once, its best result."""

    student: str
    notebooks: list[str] = field(default_factory=list)
    grades: dict[str, ExerciseGrade] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    failed_runs: int = 0


def by_student(grades: list[NotebookGrade]) -> list[StudentGrade]:
    """Merge notebooks per student (in first-seen order); each exercise's best result."""
    students: dict[str, StudentGrade] = {}
    for g in grades:
        who = g.student or g.path
        sg = students.setdefault(who, StudentGrade(who))
        sg.notebooks.append(g.path)
        sg.seconds += g.seconds
        sg.failed_runs += g.failed_runs
        sg.notes += [f"{one_line(g.path)}: {n}" for n in g.notes]
        for eid, eg in g.grades.items():
            old = sg.grades.get(eid)
            if old is None or _RANK[eg.outcome] < _RANK[old.outcome]:
                sg.grades[eid] = eg
    return list(students.values())


def _id_key(exercise_id: str) -> tuple[int, ...]:
    return tuple(map(int, exercise_id.split(".")))


def printable(text: str) -> str:
    """`text` without control characters (terminal escapes, carriage returns) or lone
    surrogates (which no file or terminal can encode), newlines kept."""
    return _CONTROL.sub("?", text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(text: str) -> str:
    """A name (a student id, a path) on one line: every control character (newline and
    escape included), lone surrogate and non-UTF-8 byte of a file name written as a
    backslash escape (`jos\\xe9`), so a name can neither break a line nor forge one;
    what it gives back it leaves as it is."""
    return _UNSAFE.sub(_escape, text)


def csv_cell(text: str) -> str:
    """A cell safe for a spreadsheet: on one line, and a cell that could start a formula
    (`=`, `+`, `-`, `@`, tab, carriage return) behind an apostrophe (OWASP's rule)."""
    cell = one_line(text)
    return "'" + cell if cell.startswith(FORMULA_START) else cell


def score_table(students: list[StudentGrade]) -> list[list[str]]:
    """Rows of [student, points per exercise..., total, max, grader_errors, notebooks];
    the first row is the header; a grader error reads `error`."""
    ids = sorted({i for s in students for i in s.grades}, key=_id_key)
    rows = [["student", *ids, "total", "max", "grader_errors", "notebooks"]]
    for s in students:
        cells = [("error" if s.grades[i].outcome == "error" else str(s.grades[i].points))
                 if i in s.grades else "" for i in ids]
        rows.append([one_line(s.student), *cells, str(s.points), str(s.max_points),
                     str(s.errors), " ".join(map(one_line, s.notebooks))])
    return rows


def csv_text(rows: list[list[str]]) -> str:
    """The score table as CSV text, every cell neutralized (`csv_cell`)."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([[csv_cell(c) for c in r] for r in rows])
    return out.getvalue()


def feedback_text(grade: StudentGrade) -> str:
    """Everything a student should read: every exercise's result and message, every note."""
    lines = [f"{one_line(grade.student)}: {grade.points} of {grade.max_points} points "
             f"({', '.join(map(one_line, grade.notebooks))})", ""]
    for eg in sorted(grade.grades.values(), key=lambda g: _id_key(g.exercise_id)):
        head = f"{eg.exercise_id}: {eg.points}/{eg.max_points} {eg.outcome}"
        lines.append(head if eg.message is None else f"{head}\n  " +
                     eg.message.replace("\n", "\n  "))
    lines += [f"note: {n}" for n in grade.notes]
    return printable("\n".join(lines)) + "\n"


def feedback_name(student: str) -> str:
    """A file name for a student's feedback, unique per student id (a hash of it is part)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", student).strip("._")[-100:] or "student"
    digest = hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{stem}-{digest[:10]}.txt"


def gradescope(grade: StudentGrade, seconds: float, visibility: str = "visible"
               ) -> dict[str, object]:
    """Gradescope's results.json for one student's submission: one test per exercise.

    Fields as Gradescope's autograder specification names them: `score`,
    `execution_time`, `output`, `visibility`, `stdout_visibility`, and `tests[]` with
    `name`, `number`, `score`, `max_score`, `status`, `output`, `visibility`."""
    tests: list[dict[str, object]] = []
    for eg in sorted(grade.grades.values(), key=lambda e: _id_key(e.exercise_id)):
        output = eg.message or "passed"
        if eg.outcome == "error":
            output = ("grader error: the grader could not check this exercise; please tell "
                      f"your instructor. {output}")
        tests.append({"name": f"{eg.exercise_id} {eg.title}".strip(),
                      "number": eg.exercise_id, "score": eg.points,
                      "max_score": eg.max_points,
                      "status": "passed" if eg.outcome == "passed" else "failed",
                      "output": printable(output), "visibility": visibility})
    return {"score": grade.points, "execution_time": round(seconds, 1),
            "output": printable("\n".join(grade.notes)), "visibility": visibility,
            "stdout_visibility": "hidden", "tests": tests}


def write_checked(path: Path, text: str) -> str | None:
    """Write `text` to `path` (via a temporary file and a rename), read it back; None when
    the file holds what was written, else what is wrong. Text no file can hold (a lone
    surrogate) is written as a backslash escape."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    try:
        back = path.read_text(encoding="utf-8")
    except OSError as exc:
        return f"{path} could not be read back: {exc}"
    return None if back == text else f"{path} changed after it was written"


def write_reports(students: list[StudentGrade], folder: Path, seconds: float,
                  output_format: str = "csv", visibility: str = "visible"
                  ) -> tuple[list[Path], list[str]]:
    """grades.csv, feedback/<student>.txt and (gradescope) results.json under `folder`;
    (the files written, the problems found reading them back)."""
    files = {folder / "grades.csv": csv_text(score_table(students))}
    for s in students:
        files[folder / "feedback" / feedback_name(s.student)] = feedback_text(s)
    if output_format == "gradescope":
        one = students[0] if students else StudentGrade("")  # the caller allows one student
        files[folder / "results.json"] = json.dumps(gradescope(one, seconds, visibility),
                                                    indent=1) + "\n"
    problems = [p for path, text in files.items() if (p := write_checked(path, text))]
    return list(files), problems
