"""A submitted notebook: read once, whose it is, and which exercises it answers by what name.

A notebook's exercises are the assignment's when one is named (`--exercises`: only those
count), else its chapter's (file name `NN_...`) plus every `check("N.M", name)` in its code.
Each exercise is judged on one function: the last one its code passes to check() for it,
else the one the exercise's stub names.

Whose it is is bounded by where it was found: the student id is the one given
(`--student`), else the folder that holds it below the batch's common folder
(`submissions/alice/...` is alice's, every file in it merged into one row); a notebook lying
in the common folder itself is its own student (`submissions/alice.ipynb`). The notebook
metadata `dpsim.student` is the learner's claim and is never trusted: a claim that differs
is noted. A symbolic link (the file, or a folder between it and the common folder) is not
followed: it is refused, and nothing of its target is read. A hard link to a file with a
name outside the common folder (a tar archive can make one) is refused too, unread.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
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


def assignment(spec: str) -> list[Exercise]:
    """The exercises an assignment names: `1` (chapter 1's), `1.3`, or several, comma
    separated (`1,4.2`); ValueError for an unknown chapter or id."""
    found: dict[str, Exercise] = {}
    for item in (part.strip() for part in spec.split(",")):
        if item.isdigit():
            chapter = chapter_exercises(int(item))
            if not chapter:
                raise ValueError(f"exercises: chapter {item} has no exercises")
            found.update((ex.exercise_id, ex) for ex in chapter)
        else:
            ex = get_exercise(item)
            found[ex.exercise_id] = ex
    return [found[i] for i in sorted(found, key=lambda i: tuple(map(int, i.split("."))))]


def notebook_exercises(path: Path, nb: nbformat.NotebookNode,
                       only: list[Exercise] | None = None) -> list[Exercise]:
    """The exercises a notebook answers: the assignment's (`only`: every one of them and
    nothing else) or else its chapter's and those its code checks."""
    if only is not None:
        return list(only)
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


def graded_name(ex: Exercise, nb: nbformat.NotebookNode) -> str:
    """The one function judged for `ex`: the last name the code passes to check() for it,
    else the stub's name. Passing several (a hedge) earns no second try."""
    names = [fn for i, fn in CHECK_CALL.findall(_code(nb)) if i == ex.exercise_id]
    return names[-1] if names else ex.function


def common_folder(paths: list[Path]) -> Path:
    """The folder holding every one of `paths` (their links not followed)."""
    return Path(os.path.commonpath([os.path.abspath(p.parent) for p in paths]))


def student_id(path: Path, given: str | None = None, root: Path | None = None) -> str:
    """Whose notebook: `given`, else the folder holding it right below `root` (the batch's
    common folder; default the notebook's own folder), else `root`'s name/file name."""
    if given:
        return given
    here = Path(os.path.abspath(path))
    top = Path(os.path.abspath(root)) if root is not None else here.parent
    parts = here.parent.relative_to(top).parts if here.parent.is_relative_to(top) else ()
    return parts[0] if parts else f"{top.name}/{here.name}"


def claimed_id(nb: nbformat.NotebookNode) -> str | None:
    """The student id the notebook's metadata claims (`dpsim.student`), if any."""
    meta = nb.metadata.get("dpsim", {}) if isinstance(nb.metadata, dict) else {}
    claim = meta.get("student") if isinstance(meta, dict) else None
    return claim.strip() if isinstance(claim, str) and claim.strip() else None


def _link_between(path: Path, root: Path) -> Path | None:
    """The first symbolic link among `path` and its folders below `root`, if any."""
    here = Path(os.path.abspath(path))
    top = Path(os.path.abspath(root))
    steps = [here, *here.parents]
    for step in steps:
        if step == top or not step.is_relative_to(top):
            break
        if step.is_symlink():
            return step
    return None


def _read_regular(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes and status of `path`, a regular file reached without following a link
    (OSError otherwise)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path}: not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(), st
    finally:
        os.close(fd)


def _links_outside(st: os.stat_result, root: Path) -> int:
    """How many of the hard links to the file `st` lie outside `root` (0 for a file with one
    name; else `root` is searched for the others, without following links)."""
    if st.st_nlink <= 1:
        return 0
    inside = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                other = os.lstat(os.path.join(folder, name))
                inside += (other.st_ino, other.st_dev) == (st.st_ino, st.st_dev)
    return max(0, st.st_nlink - inside)


@dataclass(frozen=True)
class Submission:
    """One notebook to grade: its path, content (None if unreadable or refused), student,
    digest, and notes on how it was read."""

    path: Path
    nb: nbformat.NotebookNode | None
    student: str
    digest: str
    problem: str = ""  # why the notebook could not be read
    notes: tuple[str, ...] = ()


def read_submission(path: Path, student: str | None = None, root: Path | None = None
                    ) -> Submission:
    """Read one notebook found under `root` (the batch's common folder; default its own
    folder). Never raises for a malformed file or a link: `problem` says why it is not
    graded; OSError only where a regular file cannot be read."""
    who = student_id(path, student, root)
    top = root if root is not None else path.parent
    link = _link_between(path, top)
    if link is not None:
        what = "the notebook" if link == Path(os.path.abspath(path)) else "its folder"
        return Submission(path, None, who, "link:" + hashlib.sha256(
            os.fsencode(os.path.abspath(path))).hexdigest(),
            f"not graded: {what} is a symbolic link, and links in a submission are not "
            "followed (submit the notebook file itself)")
    outside = _links_outside(os.lstat(path), top)
    if outside:  # a hard link (an unpacked archive's, say) to a file elsewhere: not read
        return Submission(path, None, who, "link:" + hashlib.sha256(
            os.fsencode(os.path.abspath(path))).hexdigest(),
                          f"not graded: the notebook is a hard link to a file outside the "
                          f"submissions ({outside} other name{'s' if outside > 1 else ''}), "
                          "and links in a submission are not followed (submit the notebook "
                          "file itself)")
    data, st = _read_regular(path)
    if st.st_nlink > 1 and _links_outside(st, top):
        raise OSError(f"{path}: replaced by a hard link while it was read")
    digest = hashlib.sha256(data).hexdigest()
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # malformed JSON, wrong encoding, not a notebook
        return Submission(path, None, who, digest,
                          f"the notebook could not be read: {type(exc).__name__}: "
                          f"{str(exc)[:300]}")
    claim = claimed_id(nb)
    notes = () if claim is None or claim == who else (
        f"the notebook's metadata names the student {claim!r}; it is graded as "
        f"{who!r}'s, where it was found" if student is None else
        f"the notebook's metadata names the student {claim!r}; it is graded as "
        f"{who!r}'s (--student)",)
    return Submission(path, nb, who, digest, notes=notes)
