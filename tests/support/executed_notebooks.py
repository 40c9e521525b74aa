"""Executed copies of notebooks: the nbval run writes them, the browser test shows them.

Every notebook in notebooks/ runs its long cells once per suite: nbval runs it (and
compares its checked outputs); the repository's conftest.py writes what every cell printed
and drew into `artifacts/executed/<run id>/<name>.ipynb`; the browser test opens that copy
in JupyterLab instead of running the real runs a second time, and checks what it shows
(errors, figures drawn by plotly.js, their ranges and overlaps, screenshots).

A widget needs the kernel that made it: the copy keeps no output of a cell that showed an
ipywidget, and lists those cells in its metadata (`widget_cells`). The browser test runs
them live, with the cells they need (tests/support/cell_dependencies.py). Those cells'
outputs, with the still picture a dashboard carries (its `text/html`,
dpsim.widgets.dashboard), are kept in the cell's metadata instead (`STILL_KEY`), for the
site built from these copies (dpsim.course.website).

The run id is pytest-xdist's id of the test run (the same in every worker) or, without
xdist, one made for this pytest process; a copy from an earlier run is never read.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import nbformat

from dpsim.course.website.pages import STILL_KEY, WIDGET_MIME

REPO_ROOT = Path(__file__).resolve().parents[2]
EXECUTED_DIR = REPO_ROOT / "artifacts" / "executed"
METADATA_KEY = "dpsim"  # the copy's notebook metadata: {"widget_cells": [code cell numbers]}
_LOCAL_RUN_ID = uuid.uuid4().hex  # this pytest process's run, when xdist is not in use


def run_id() -> str:
    """The id of this test run, the same in every pytest-xdist worker."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or _LOCAL_RUN_ID


def replayed(notebook: Path) -> bool:
    """Whether the browser test shows `notebook` from the nbval run's executed copy: every
    notebook in the repository's notebooks/."""
    return notebook.resolve().parent == REPO_ROOT / "notebooks"


def executed_path(notebook: Path, run: str | None = None) -> Path:
    """Where the executed copy of `notebook` from run `run` (default: this run) lives."""
    return EXECUTED_DIR / (run or run_id()) / notebook.name


def write_executed(notebook: Path, outputs: dict[int, list[Any]]) -> Path:
    """Write `notebook` with the outputs nbval saw, by code cell number (0, 1, ...).

    A cell with no entry (skipped, or not reached) keeps no output and no count; nor does
    a cell that showed an ipywidget (its number goes into the metadata's `widget_cells`).
    The file is written under a temporary name and renamed, so a reader never sees half.
    """
    nb = nbformat.read(notebook, as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    widgets = [k for k, outs in sorted(outputs.items())
               if any(WIDGET_MIME in (o.get("data") or {}) for o in outs)]
    nb.metadata[METADATA_KEY] = {"widget_cells": widgets}
    count = 0
    for k, cell in enumerate(code_cells):
        if k in outputs and k not in widgets:
            count += 1
            cell.execution_count = count
            cell.outputs = [_with_count(o, count) for o in outputs[k]]
        else:
            cell.execution_count = None
            cell.outputs = []
            if k in widgets:
                cell.metadata[STILL_KEY] = list(outputs[k])
    target = executed_path(notebook)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    nbformat.write(nb, partial)
    partial.replace(target)
    return target


def _with_count(output: Any, count: int) -> Any:
    """An execute_result carries its cell's count (nbval keeps the kernel's)."""
    if output.get("output_type") == "execute_result":
        output = nbformat.from_dict({**output, "execution_count": count})
        output.setdefault("metadata", {})
    return output


def widget_cells(executed: Path) -> list[int]:
    """Code cell numbers of an executed copy whose cells showed an ipywidget under nbval."""
    nb = nbformat.read(executed, as_version=4)
    return [int(k) for k in nb.metadata.get(METADATA_KEY, {}).get("widget_cells", [])]


def cells_to_run(executed: Path) -> list[int]:
    """Code cell numbers the browser runs live in an executed copy: its widget cells and
    the cells they need (none when it shows no widget)."""
    from tests.support.cell_dependencies import live_cells

    widgets = widget_cells(executed)
    if not widgets:
        return []
    nb = nbformat.read(executed, as_version=4)
    return live_cells([c.source for c in nb.cells if c.cell_type == "code"], widgets)
