"""The executed copy the nbval run writes for the browser test (tests/support)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.support import executed_notebooks as ex

ROOT = Path(__file__).resolve().parents[2]


def _write(notebook: Path, outputs: dict[int, list[nbformat.NotebookNode]]) -> Path:
    notebook.parent.mkdir(exist_ok=True)
    nbformat.write(new_notebook(cells=[
        new_markdown_cell("intro"), new_code_cell("import ipywidgets as w\nx = 1"),
        new_code_cell("x"), new_code_cell("w.IntSlider(x)"),
        new_code_cell("print('never reached')")]),
        notebook)
    return ex.write_executed(notebook, outputs)


def _remove(path: Path) -> None:
    path.unlink()
    if not any(path.parent.iterdir()):
        path.parent.rmdir()


def test_copy_holds_the_outputs_nbval_saw_in_order(tmp_path: Path) -> None:
    notebook = tmp_path / "notebooks" / "99_replay_check.ipynb"
    shown = new_output("execute_result", data={"text/plain": "1"}, execution_count=7)
    path = _write(notebook, {0: [], 1: [shown]})
    try:
        assert path == ex.executed_path(notebook)
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == [1, 2, None, None]
        assert code[1].outputs[0]["data"] == {"text/plain": "1"}
        assert code[1].outputs[0]["execution_count"] == 2
        assert code[2].outputs == []
        assert ex.widget_cells(path) == []
        assert ex.cells_to_run(path) == []  # no widget: nothing runs live
        assert ex.replayed(notebook) is False  # not in the repository's notebooks/
    finally:
        _remove(path)


def test_widget_cells_keep_no_output_and_run_live_with_what_they_need(tmp_path: Path) -> None:
    notebook = tmp_path / "notebooks" / "98_widget_check.ipynb"
    widget = new_output("display_data", data={"text/plain": "IntSlider(value=1)",
                                              ex.WIDGET_MIME: {"model_id": "abc"}})
    printed = new_output("stream", name="stdout", text="drawn\n")
    path = _write(notebook, {0: [], 1: [], 2: [printed, widget], 3: []})
    try:
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert code[2].outputs == []
        assert [c.execution_count for c in code] == [1, 2, None, 3]
        assert ex.widget_cells(path) == [2]
        assert ex.cells_to_run(path) == [0, 2]  # cell 0 binds w and x (and is the setup cell)
    finally:
        _remove(path)


def test_every_notebook_is_replayed() -> None:
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    assert all(ex.replayed(nb) for nb in notebooks)
    assert not ex.replayed(ROOT / "solutions" / notebooks[0].name)
