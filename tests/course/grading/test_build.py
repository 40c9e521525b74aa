"""exercises/ is generated from solutions/: stubs, freshness checks, and a real run."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from dpsim.course.grading import all_exercises
from dpsim.course.grading import build as exercises

ROOT = Path(__file__).resolve().parents[3]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of solutions/ and exercises/ to break and rebuild."""
    for folder in ("solutions", "exercises"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def _write(path: Path, *cells: nbformat.NotebookNode) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=list(cells)), path)
    return path


def test_committed_exercises_are_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    assert exercises.main("check", str(ROOT)) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith("exercises: OK")


def test_build_is_idempotent(repo: Path) -> None:
    shutil.rmtree(repo / "exercises")
    first = exercises.build(repo)
    texts = {p.name: p.read_bytes() for p in (repo / "exercises").glob("*.ipynb")}
    assert len(first) == len(SOLUTIONS)
    assert len(texts) == len(SOLUTIONS)
    assert exercises.build(repo) == []
    assert texts == {p.name: p.read_bytes() for p in (repo / "exercises").glob("*.ipynb")}
    assert texts == {p.name: (ROOT / "exercises" / p.name).read_bytes() for p in SOLUTIONS}


def test_check_names_stale_missing_and_orphaned_files(repo: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    stale, missing = SOLUTIONS[0].name, SOLUTIONS[-1].name
    nb = nbformat.read(repo / "exercises" / stale, as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, repo / "exercises" / stale)
    if missing != stale:
        (repo / "exercises" / missing).unlink()
    else:  # one solution notebook: make a second one whose exercise is missing
        missing = "98_extra.ipynb"
        shutil.copy(SOLUTIONS[0], repo / "solutions" / missing)
    shutil.copy(SOLUTIONS[0], repo / "exercises" / "99_orphan.ipynb")
    assert exercises.main("check", str(repo)) == 1
    out = capsys.readouterr().out
    assert f"exercises/{stale} is stale" in out
    assert f"exercises/{missing} is missing" in out
    assert "exercises/99_orphan.ipynb is orphaned" in out
    assert "python -m dpsim exercises build" in out
    assert exercises.main("build", str(repo)) == 0
    assert not (repo / "exercises" / "99_orphan.ipynb").exists()
    assert exercises.main("check", str(repo)) == 0


def test_stub_keeps_indentation_and_markdown_answers_are_removed(tmp_path: Path) -> None:
    _write(tmp_path / "solutions" / "07_demo.ipynb",
           new_markdown_cell("Question?\n\n### BEGIN SOLUTION\nThe answer.\n### END SOLUTION"),
           new_code_cell("def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n"
                         "    ### END SOLUTION\n\n\nclass A:\n    def g(self):\n"
                         "        ### BEGIN SOLUTION\n        return 2\n"
                         "        ### END SOLUTION"),
           new_code_cell('# NBVAL_CHECK_OUTPUT\ncheck("7.1", f)\ncheck("7.2", g)',
                         execution_count=3, outputs=[nbformat.v4.new_output(
                             "stream", name="stdout", text="PASS 7.1 (3/3)\n")],
                         metadata={"scrolled": True}))
    assert exercises.main("build", str(tmp_path)) == 0
    nb = nbformat.read(tmp_path / "exercises" / "07_demo.ipynb", as_version=4)
    assert nb.cells[0].source == "Question?\n\n_Your answer here._"
    assert nb.cells[1].source == (
        'def f(x):\n    y = 1\n    raise NotImplementedError("Exercise 7.1: write your code '
        'here")\n\n\nclass A:\n    def g(self):\n        raise NotImplementedError("Exercise '
        '7.2: write your code here")')
    graded = nb.cells[2]
    assert graded.outputs == []
    assert graded.execution_count is None
    assert graded.metadata == {}
    assert set(nb.metadata) == {"kernelspec", "language_info"}


@pytest.mark.parametrize(("source", "error"), [
    ("def f():\n    ### BEGIN SOLUTION\n    return 1", "has no '### END SOLUTION'"),
    ("def f():\n    return 1\n    ### END SOLUTION", "has no '### BEGIN SOLUTION'"),
    ("def f():\n    ### BEGIN SOLUTION\n    ### BEGIN SOLUTION\n    ### END SOLUTION",
     "opens '### BEGIN SOLUTION' again"),
    ("def f():\n    return 1", "no '### BEGIN SOLUTION' ... '### END SOLUTION' blocks"),
    ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "is not inside a function"),
    ("def h():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION",
     "the solution block in `h` has no graded cell"),
])
def test_bad_markers_give_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        source: str, error: str) -> None:
    _write(tmp_path / "solutions" / "08_bad.ipynb", new_markdown_cell("intro"),
           new_code_cell(source), new_code_cell('check("8.1", f)'))
    assert exercises.main("build", str(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "solutions/08_bad.ipynb" in out
    assert error in out
    if "no '### BEGIN SOLUTION' ..." not in error:
        assert "cell 1 (code)" in out


def test_every_registered_exercise_is_in_a_solution_notebook() -> None:
    code = {p.name: "\n".join(c.source for c in nbformat.read(p, as_version=4).cells
                              if c.cell_type == "code") for p in SOLUTIONS}
    for ex in all_exercises():
        homes = [name for name, text in code.items()
                 if re.search(rf"""check\(\s*["']{re.escape(ex.exercise_id)}["']\s*,\s*"""
                              rf"{ex.function}\b", text)
                 and re.search(rf"def {ex.function}\(", text)]
        assert homes, f'no solutions/ notebook defines {ex.function} and checks "{ex.exercise_id}"'
        assert all(name.startswith(f"{ex.chapter:02d}_") for name in homes)


@pytest.mark.slow
def test_generated_exercise_notebook_fails_only_in_graded_cells() -> None:
    """Run exercises/01: each graded cell raises ExerciseFailed, nothing else errors."""
    from nbclient import NotebookClient

    path = ROOT / "exercises" / "01_single_device.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    graded = errors = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errs = [o for o in cell.outputs if o.output_type == "error"]
        if "check(" in cell.source:
            graded += 1
            assert [e.ename for e in errs] == ["ExerciseFailed"], (index, errs)
            assert "is not done yet" in errs[0].evalue
        else:
            assert errs == [], (index, errs)
        errors += len(errs)
    assert graded == 5
    assert errors == graded
