"""python -m dpsim grade: cheats earn nothing, correct variants earn full points, nothing
a notebook starts outlives its grading. One grading run (module fixture) of two notebooks
from tests/course/grading_adversarial: one trick per exercise, and correct but unusual answers."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from pathlib import Path

import pytest

from dpsim.course import grader
from dpsim.course.grading.results import ExerciseGrade, NotebookGrade, score_table
from tests.course.grading_adversarial import notebooks

Graded = tuple[dict[str, dict[str, str]], str, Path, Path]


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    """Grade both notebooks once, with a grading secret and short cell limits."""
    folder = tmp_path_factory.mktemp("students")
    marks = folder / "marks"
    marks.mkdir()
    paths = notebooks.write(folder, marks)
    out_dir = folder / "out"
    out = io.StringIO()
    os.environ[grader.SECRET_VARIABLE] = "test-secret"
    try:
        with contextlib.redirect_stdout(out):
            rc = grader.main([str(p) for p in paths], cell_timeout_s=15.0,
                             out_dir=str(out_dir), output_format="gradescope")
    finally:
        del os.environ[grader.SECRET_VARIABLE]
    assert rc == 0, out.getvalue()
    with open(out_dir / "grades.csv", newline="") as f:
        rows = {Path(r["notebook"]).name: r for r in csv.DictReader(f)}
    return rows, out.getvalue(), out_dir, marks


@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", sorted(notebooks.TRICKS))
def test_every_trick_earns_nothing(graded: Graded, exercise_id: str) -> None:
    rows, out, _, _ = graded
    assert rows["01_tricks.ipynb"][exercise_id] == "0", (notebooks.TRICKS[exercise_id], out)


@pytest.mark.slow
def test_correct_answers_after_the_tricks_still_count(graded: Graded) -> None:
    rows, out, _, _ = graded
    assert rows["01_tricks.ipynb"]["6.4"] == "2", out
    assert rows["01_tricks.ipynb"]["grader_errors"] == "0", out


@pytest.mark.slow
def test_correct_variants_earn_full_points(graded: Graded) -> None:
    rows, out, _, _ = graded
    row = rows["variants.ipynb"]
    assert {i: row[i] for i in notebooks.VARIANTS} == {
        i: str(p) for i, p in notebooks.VARIANTS.items()}, out
    assert row["total"] == row["max"] == str(sum(notebooks.VARIANTS.values()))


@pytest.mark.slow
def test_limits_and_leftovers(graded: Graded) -> None:
    _, out, _, marks = graded
    assert "ignored the interrupt and was killed" in out  # SIGINT ignored: SIGKILL
    assert "copy of dpsim was changed and has been restored" in out
    assert (marks / "kernel_memory.txt").read_text() == "MemoryError"
    assert "can't allocate memory" in out or "MemoryError" in out  # 20 GiB in the sandbox
    assert "too large to check" in out
    for name in ("detached.pid", "sandbox_child.pid"):
        pid = int((marks / name).read_text())
        assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), name


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2:].split()[0]


@pytest.mark.slow
def test_feedback_and_gradescope_files(graded: Graded) -> None:
    _, _, out_dir, _ = graded
    feedback = sorted((out_dir / "feedback").glob("*.txt"))
    assert len(feedback) == 2
    tricks = next(p for p in feedback if "tricks" in p.name).read_text()
    assert "1.1: 0/2 failed" in tricks
    assert "input:" in tricks
    results = json.loads((out_dir / "results.json").read_text())
    assert {"score", "execution_time", "tests"} <= results.keys()
    assert {"name", "score", "max_score", "output"} <= results["tests"][0].keys()
    assert results["score"] == sum(t["score"] for t in results["tests"])


def test_exercises_of_a_notebook() -> None:
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell('check("1.3", f)\ncheck("42.1", g)')])
    assert [e.exercise_id for e in grader.notebook_exercises(Path("x.ipynb"), nb)] == ["1.3"]
    ids = [e.exercise_id for e in grader.notebook_exercises(Path("01_x.ipynb"), nb)]
    assert ids[:3] == ["1.1", "1.2", "1.3"]
    assert grader.notebook_exercises(Path("notes.ipynb"), new_notebook()) == []
    ex = grader.get_exercise("1.3")
    assert grader._candidate_names(ex, nb) == ["f", "largest_batch"]


def test_student_id_and_dump_parsing() -> None:
    from nbformat.v4 import new_notebook

    nb = new_notebook()
    assert grader.student_id(Path("/s/alice/01_x.ipynb"), nb) == "alice/01_x.ipynb"
    nb.metadata["dpsim"] = {"student": "a123"}
    assert grader.student_id(Path("/s/alice/01_x.ipynb"), nb) == "a123"
    assert grader.student_id(Path("x.ipynb"), nb, given="b7") == "b7"
    text = ('M {"f": "AAEC", "g": {"error": "could not be pickled: X"}, "h": "!!"}\n'
            'noise\nM not json\n')
    found = grader.parse_dump(text, "M ")
    assert found["f"] == b"\x00\x01\x02"
    assert found["g"] == "could not be pickled: X"
    assert isinstance(found["h"], str)


def test_score_table_marks_grader_errors() -> None:
    a = NotebookGrade("a.ipynb", {"1.1": ExerciseGrade("1.1", 2, 2, None, "passed")})
    b = NotebookGrade("b.ipynb", {"1.3": ExerciseGrade("1.3", 0, 1, "boom", "error"),
                                  "1.1": ExerciseGrade("1.1", 0, 2, "wrong", "failed")})
    assert score_table([a, b]) == [["notebook", "1.1", "1.3", "total", "max", "grader_errors"],
                                   ["a.ipynb", "2", "", "2", "2", "0"],
                                   ["b.ipynb", "0", "error", "0", "2", "1"]]
