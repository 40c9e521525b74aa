"""Every figure a notebook shows under nbval is checked as a learner would read it.

After each notebook cell runs, the plotly figures among its outputs (dashboards' first
drawing included) go through `tests.support.figure_checks.figure_problems`; a figure whose
axis hides its data, whose log axis spans too many decades, with an empty trace or panel,
or with a cut-off table header fails that cell.

The notebooks in notebooks/ run once per suite: their nbval cells come first in the run,
and what they printed and drew is written as an executed copy that the browser test opens
instead of running them again (it runs live only the cells its widgets need, see
tests/support/executed_notebooks.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PLOTLY_MIME = "application/vnd.plotly.v1+json"
_OUTPUTS_KEY = pytest.StashKey[dict[Path, dict[int, list[Any]]]]()


def plotly_outputs(outputs: list[Any]) -> list[dict[str, Any]]:
    """The plotly figures (as dicts) among a cell's outputs."""
    found = []
    for out in outputs or []:
        data = out.get("data") if hasattr(out, "get") else None
        if data and PLOTLY_MIME in data:
            found.append(dict(data[PLOTLY_MIME]))
    return found


def _nbval_notebook(item: pytest.Item) -> Path | None:
    """The notebook of an nbval cell item (None for any other test)."""
    if not hasattr(item, "cell_num") or not hasattr(item, "test_outputs"):
        return None
    return Path(str(item.path))


def _replayed_cell(item: pytest.Item) -> Path | None:
    """The notebook, when `item` is an nbval cell of a notebook the browser test replays."""
    from tests.support.executed_notebooks import replayed

    notebook = _nbval_notebook(item)
    return notebook if notebook is not None and replayed(notebook) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Replayed notebooks' nbval cells first, then the browser test, then the rest.

    With `--dist loadfile --no-loadscope-reorder` both workers run the notebooks first;
    the browser test starts as the last of them ends (it waits for an executed copy still
    being written) while the other worker goes on with the rest.
    """
    if not any(_replayed_cell(i) for i in items):
        return
    first = [i for i in items if _replayed_cell(i)]
    browser = [i for i in items if i.get_closest_marker("browser") and i not in first]
    rest = [i for i in items if i not in first and i not in browser]
    items[:] = first + browser + rest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail an nbval cell whose figures have problems (see tests.support.figure_checks);
    keep the outputs of a replayed notebook's cells for its executed copy."""
    try:
        result = yield
    finally:
        _keep_outputs(item)
    outputs = getattr(item, "test_outputs", None)
    if outputs:
        from tests.support.figure_checks import figure_problems

        problems = []
        for fig in plotly_outputs(outputs):
            title = ((fig.get("layout") or {}).get("title") or {})
            name = title.get("text", "untitled") if isinstance(title, dict) else str(title)
            problems += [f"figure '{name}': {p}" for p in figure_problems(fig)]
        if problems:
            pytest.fail(f"{item.nodeid}: a figure does not show its data well:\n- "
                        + "\n- ".join(problems), pytrace=False)
    return result


def _keep_outputs(item: pytest.Item) -> None:
    """Remember a replayed notebook's cell outputs; after its last cell, write the copy."""
    notebook = _replayed_cell(item)
    if notebook is None:
        return
    from tests.support.executed_notebooks import write_executed

    kept = item.config.stash.setdefault(_OUTPUTS_KEY, {}).setdefault(notebook, {})
    cell_num: int = item.cell_num  # type: ignore[attr-defined]
    kept[cell_num] = list(getattr(item, "test_outputs", None) or [])
    cells = item.parent.nb.cells  # type: ignore[union-attr]
    n_code = sum(1 for c in cells if c.cell_type == "code")
    if cell_num == n_code - 1:
        write_executed(notebook, kept)
