"""The executed copy the nbval run writes for the browser test (tests/support)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.support import executed_notebooks as ex

ROOT = Path(__file__).resolve().parents[2]


def test_copy_holds_the_outputs_nbval_saw_in_order(tmp_path: Path) -> None:
    notebook = tmp_path / "notebooks" / "99_replay_check.ipynb"
    notebook.parent.mkdir()
    nbformat.write(new_notebook(cells=[
        new_markdown_cell("intro"), new_code_cell("x = 1"), new_code_cell("x"),
        new_code_cell("never reached")]), notebook)
    shown = new_output("execute_result", data={"text/plain": "1"}, execution_count=7)
    path = ex.write_executed(notebook, {0: [], 1: [shown]})
    try:
        assert path == ex.executed_path(notebook)
        code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == [1, 2, None]
        assert code[1].outputs[0]["data"] == {"text/plain": "1"}
        assert code[1].outputs[0]["execution_count"] == 2
        assert code[2].outputs == []
        assert ex.widget_cells(path) == []
        assert ex.replayed(notebook) is False  # not one of REPLAYED's stems
    finally:
        path.unlink()
        if not any(path.parent.iterdir()):
            path.parent.rmdir()


def test_replayed_notebooks_exist_and_build_no_widgets() -> None:
    for stem in ex.REPLAYED:
        notebook = ROOT / "notebooks" / f"{stem}.ipynb"
        assert ex.replayed(notebook), stem
        code = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells
                         if c.cell_type == "code")
        assert "ipywidgets" not in code, stem
        assert "dpsim.widgets" not in code, stem
