"""A submitted notebook: read once, whose it is, and which exercises it answers by what names.

A notebook's exercises are its chapter's (file name `NN_...`) plus every `check("N.M", name)`
in its code; each is tried under its own name and every name passed to check() for it. The
student id (whose seed picks the cases) is the one given, else the notebook metadata
`dpsim.student`, else the notebook's folder and file name (`alice/01_single_device.ipynb`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from dpsim.course.grading.build import CHECK_CALL
from dpsim.course.grading.registry import (
    Exercise,
    all_exercises,
    chapter_exercises,
    get_exercise,
)


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


def candidate_names(ex: Exercise, nb: nbformat.NotebookNode) -> list[str]:
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
