"""Grades and how they are written: the score table (CSV), per-student feedback files,
and a Gradescope results.json.

An exercise is `passed` (full points), `failed` (0 points, with the message the learner
sees) or `error`: the grader itself failed on it (building the cases, the sandbox server).
An error is never scored as 0: its cell in the CSV reads `error` and it counts toward
neither the total nor the maximum, and the notes say what failed.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

STATUSES = ("passed", "failed", "error")


@dataclass(frozen=True)
class ExerciseGrade:
    """Points one notebook earned on one exercise, and why."""

    exercise_id: str
    points: int
    max_points: int
    message: str | None = None  # None when passed
    status: str = ""  # passed | failed | error ("" : passed if points, else failed)

    @property
    def outcome(self) -> str:
        """passed, failed or error."""
        return self.status or ("passed" if self.message is None else "failed")


@dataclass
class NotebookGrade:
    """All grades of one notebook, with notes on how its run went."""

    path: str
    grades: dict[str, ExerciseGrade] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def points(self) -> int:
        """Points earned."""
        return sum(g.points for g in self.grades.values() if g.outcome != "error")

    @property
    def max_points(self) -> int:
        """Points available (exercises the grader could check)."""
        return sum(g.max_points for g in self.grades.values() if g.outcome != "error")

    @property
    def errors(self) -> int:
        """Exercises the grader failed on."""
        return sum(g.outcome == "error" for g in self.grades.values())


def _id_key(exercise_id: str) -> tuple[int, ...]:
    return tuple(map(int, exercise_id.split(".")))


def score_table(grades: list[NotebookGrade]) -> list[list[str]]:
    """Rows of [notebook, points per exercise..., total, max, errors]; first row: header."""
    ids = sorted({i for g in grades for i in g.grades}, key=_id_key)
    rows = [["notebook", *ids, "total", "max", "grader_errors"]]
    for g in grades:
        cells = [("error" if g.grades[i].outcome == "error" else str(g.grades[i].points))
                 if i in g.grades else "" for i in ids]
        rows.append([g.path, *cells, str(g.points), str(g.max_points), str(g.errors)])
    return rows


def write_csv(rows: list[list[str]], path: Path) -> None:
    """The score table as CSV."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)


def feedback_text(grade: NotebookGrade) -> str:
    """Everything a student should read about one notebook: every message and note."""
    lines = [f"{grade.path}: {grade.points} of {grade.max_points} points", ""]
    for eg in sorted(grade.grades.values(), key=lambda g: _id_key(g.exercise_id)):
        head = f"{eg.exercise_id}: {eg.points}/{eg.max_points} {eg.outcome}"
        lines.append(head if eg.message is None else f"{head}\n  " +
                     eg.message.replace("\n", "\n  "))
    lines += [f"note: {n}" for n in grade.notes]
    return "\n".join(lines) + "\n"


def feedback_name(path: str) -> str:
    """A file name for a notebook's feedback: its path with separators replaced."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(Path(path).with_suffix("")).strip("/"))
    return f"{stem[-150:]}.txt"


def write_feedback(grades: list[NotebookGrade], folder: Path) -> list[Path]:
    """One feedback file per notebook in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for g in grades:
        path = folder / feedback_name(g.path)
        path.write_text(feedback_text(g), encoding="utf-8")
        written.append(path)
    return written


def gradescope(grades: list[NotebookGrade], seconds: float) -> dict[str, object]:
    """A Gradescope results.json: one test per exercise of every notebook."""
    tests: list[dict[str, object]] = []
    for g in grades:
        for eg in sorted(g.grades.values(), key=lambda e: _id_key(e.exercise_id)):
            output = eg.message or "passed"
            if eg.outcome == "error":
                output = f"grader error (not counted; please tell your instructor): {output}"
            tests.append({"name": f"{Path(g.path).name} {eg.exercise_id}",
                          "score": eg.points, "max_score": eg.max_points if eg.outcome !=
                          "error" else 0, "output": output})
    notes = [f"{Path(g.path).name}: {n}" for g in grades for n in g.notes]
    return {"score": sum(g.points for g in grades), "execution_time": round(seconds, 1),
            "output": "\n".join(notes), "tests": tests}


def write_gradescope(grades: list[NotebookGrade], seconds: float, path: Path) -> None:
    """Write `gradescope(...)` as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gradescope(grades, seconds), indent=1) + "\n", encoding="utf-8")
