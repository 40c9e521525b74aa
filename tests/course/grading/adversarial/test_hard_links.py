"""A hard link in what a class uploads (a tar archive can hold one) to a file outside the
submissions is refused unread; hard links among the submissions themselves are read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dpsim.course.grading.grade.submission import read_submission

SOLUTION = Path(__file__).parents[4] / "solutions" / "01_single_device.ipynb"


def test_a_hard_link_to_a_file_outside_is_refused_unread(tmp_path: Path) -> None:
    outside = tmp_path / "instructor" / "01_single_device.ipynb"
    outside.parent.mkdir()
    shutil.copy(SOLUTION, outside)
    submissions = tmp_path / "submissions"
    (submissions / "mallory").mkdir(parents=True)
    linked = submissions / "mallory" / "01_single_device.ipynb"
    os.link(outside, linked)
    sub = read_submission(linked, root=submissions)
    assert sub.nb is None
    assert sub.student == "mallory"
    assert "hard link to a file outside the submissions (1 other name)" in sub.problem
    assert sub.digest.startswith("link:")  # nothing of the file's content, not even a hash


def test_hard_links_inside_the_submissions_are_read(tmp_path: Path) -> None:
    submissions = tmp_path / "submissions"
    (submissions / "alice").mkdir(parents=True)
    first = submissions / "alice" / "01_single_device.ipynb"
    shutil.copy(SOLUTION, first)
    second = submissions / "alice" / "copy" / "01_single_device.ipynb"
    second.parent.mkdir()
    os.link(first, second)
    sub = read_submission(second, root=submissions)
    assert sub.nb is not None, sub.problem
    assert not sub.problem, sub.problem
    assert sub.student == "alice"
