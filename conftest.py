"""Every figure a notebook shows under nbval is checked as a learner would read it.

After each notebook cell runs, the plotly figures among its outputs (dashboards' first
drawing included) go through `tests.support.figure_checks.figure_problems`; a figure whose axis hides
its data, whose log axis spans too many decades, with an empty trace or panel, or with a
cut-off table header fails that cell.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def plotly_outputs(outputs: list[Any]) -> list[dict[str, Any]]:
    """The plotly figures (as dicts) among a cell's outputs."""
    found = []
    for out in outputs or []:
        data = out.get("data") if hasattr(out, "get") else None
        if data and PLOTLY_MIME in data:
            found.append(dict(data[PLOTLY_MIME]))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail an nbval cell whose figures have problems (see tests.support.figure_checks)."""
    result = yield
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
