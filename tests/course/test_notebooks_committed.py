"""Committed notebooks are small and carry only the outputs nbval compares."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from dpsim.course import notebook_outputs
from dpsim.course.notebook_outputs import CHECK_MARK, problems, strip_outputs

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted(p for folder in ("notebooks", "solutions", "exercises")
                   for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_committed_notebook_is_clean(path: Path) -> None:
    assert problems(path) == []


def test_there_are_committed_notebooks() -> None:
    assert any(p.parent.name == "solutions" for p in COMMITTED)
    assert {p.name for p in COMMITTED if p.parent.name == "exercises"} == {
        p.name for p in COMMITTED if p.parent.name == "solutions"}


def _printing(text: str, count: int | None = 1) -> nbformat.NotebookNode:
    return new_code_cell(f"print({text!r})", execution_count=count,
                         outputs=[new_output("stream", name="stdout", text=text + "\n")])


def test_problems_finds_each_kind(tmp_path: Path) -> None:
    html = new_output("display_data", data={"text/html": "<script>/** plotly.js v2.35 */</script>"})
    nb = new_notebook(cells=[
        _printing("stray"),
        new_code_cell(f"{CHECK_MARK}\nprint(1)"),
        new_code_cell(f"{CHECK_MARK}\nfig", execution_count=None, outputs=[html]),
        new_markdown_cell("### BEGIN SOLUTION\nx\n### END SOLUTION"),
    ])
    (tmp_path / "exercises").mkdir()
    for folder in ("notebooks", "exercises"):
        (tmp_path / folder).mkdir(exist_ok=True)
        nbformat.write(nb, tmp_path / folder / "01_x.ipynb")
    found = "\n".join(problems(tmp_path / "notebooks" / "01_x.ipynb"))
    assert "cell 0: has outputs but is not a # NBVAL_CHECK_OUTPUT cell" in found
    assert "cell 0: has an execution count" in found
    assert "cell 1: a # NBVAL_CHECK_OUTPUT cell without its stored output" in found
    assert "cell 2: a # NBVAL_CHECK_OUTPUT cell with outputs but no execution count" in found
    assert "cell 2: embeds plotly.js" in found
    assert "solution marker" not in found
    in_exercises = "\n".join(problems(tmp_path / "exercises" / "01_x.ipynb"))
    assert "cell 3: an exercise notebook contains a solution marker" in in_exercises
    assert "without its stored output" not in in_exercises  # exercises keep no outputs


def test_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("x" * 210_000)]), path)
    assert any("over the 200 KB limit" in p for p in problems(path))


def test_strip_keeps_only_checked_outputs() -> None:
    nb = new_notebook(cells=[_printing("a", 1), _printing("b", 2)], metadata={
        "widgets": {"state": {}}, "language_info": {"name": "python", "version": "3.11.7"}})
    nb.cells[1].source = f"{CHECK_MARK}\n" + nb.cells[1].source
    nb.cells[1].metadata = {"execution": {"iopub.status.busy": "x"}, "tags": ["keep"]}
    strip_outputs(nb)
    assert nb.cells[0].outputs == []
    assert nb.cells[0].execution_count is None
    assert nb.cells[1].outputs[0].text == "b\n"
    assert nb.cells[1].execution_count == 2
    assert nb.cells[1].metadata == {"tags": ["keep"]}
    assert nb.metadata == {"language_info": {"name": "python"}}


@pytest.mark.slow
def test_refresh_runs_and_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "01_tiny.ipynb"
    (tmp_path / "data.txt").write_text("from the notebook's folder")
    nbformat.write(new_notebook(cells=[
        new_code_cell("x = open('data.txt').read()\nprint('not kept')"),
        new_code_cell(f"{CHECK_MARK}\nprint(x)"),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                "language": "python"}}), path)
    assert notebook_outputs.main("check", [str(path)]) == 1
    assert notebook_outputs.main("refresh", [str(path)]) == 0
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].outputs == []
    assert nb.cells[0].execution_count is None
    assert nb.cells[1].outputs[0].text == "from the notebook's folder\n"
    assert notebook_outputs.main("check", [str(tmp_path)]) == 0
    assert "notebooks: OK, 1 notebook(s)" in capsys.readouterr().out
    nbformat.write(new_notebook(cells=[new_code_cell("1 / 0")]), tmp_path / "02_bad.ipynb")
    assert notebook_outputs.main("refresh", [str(tmp_path / "02_bad.ipynb")]) == 1
    assert "02_bad.ipynb: FAILED, not written" in capsys.readouterr().out
