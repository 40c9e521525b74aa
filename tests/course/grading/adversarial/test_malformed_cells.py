"""A notebook whose cell source is not text (valid JSON, not a notebook nbformat writes) is
read as unreadable, so its chapter's exercises are listed at 0 with the reason, instead of
a grader error with 0 of 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpsim.course.grading.grade.submission import read_submission

SOLUTION = Path(__file__).parents[4] / "solutions" / "01_single_device.ipynb"


@pytest.mark.parametrize("source", [0, None, ["a", 1], {"x": 1}])
def test_a_cell_whose_source_is_not_text_is_unreadable(tmp_path: Path, source: object
                                                        ) -> None:
    nb = json.loads(SOLUTION.read_text())
    first = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"][first]["source"] = source
    path = tmp_path / "bob" / "01_single_device.ipynb"
    path.parent.mkdir()
    path.write_text(json.dumps(nb))
    sub = read_submission(path, root=tmp_path)
    assert sub.nb is None
    assert sub.problem.startswith("the notebook could not be read"), sub.problem


def test_an_honest_notebook_is_read() -> None:
    sub = read_submission(SOLUTION)
    assert sub.nb is not None, sub.problem
