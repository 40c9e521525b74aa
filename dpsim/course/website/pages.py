"""Turn the course's notebooks into the site's pages.

A chapter page is the notebook as it ran, with three changes: each plotly figure becomes a
<div> that the page's own plotly.js draws (still interactive: zoom, hover); a dashboard
shows the still picture it carries (dpsim.widgets.dashboard) instead of a widget that
needs a kernel; and a note under the title says where the numbers come from. Test markers
(`# NBVAL_...` lines) are left out. An exercise page is the exercise notebook with no
outputs and a note on how to run it; answers never reach the site (exercises/ holds none).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import nbformat
import plotly.io as pio

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# In an executed copy (tests/support/executed_notebooks.py): a widget cell's outputs as the
# kernel sent them (the widget view with its still picture), kept in the cell's metadata.
STILL_KEY = "dpsim_still_outputs"
NO_STILL = ('<p class="dpsim-dashboard-note">A dashboard: run this notebook in JupyterLab '
            "(<code>make lab</code>) to see it and move its controls.</p>")
RUN_EXERCISES = (
    ":::{tip}\n"
    "**How to run these exercises.** `make lab`, then open `exercises/{name}` in JupyterLab. "
    "Replace each `raise NotImplementedError` with your code and run the graded cell under "
    "it: it prints `PASS` or says on which input your function went wrong. Exercises that "
    "take a torch function run it on real ranks (gloo processes). Instructors grade a batch "
    "with `python -m dpsim grade`.\n"
    ":::\n")


def figure_html(figure: Mapping[str, Any], div_id: str) -> str:
    """A plotly figure (its JSON: data, layout, frames) as a <div> and the script that draws
    it with the page's plotly.js; as wide as the page (a fixed width is dropped); an
    animation starts at its first frame."""
    layout = {k: v for k, v in (figure.get("layout") or {}).items() if k != "width"}
    fig = {**figure, "layout": {**layout, "autosize": True}}
    # auto_play off: an animation waits at its first frame for Play, as in JupyterLab
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id,
                       default_width="100%", validate=False, auto_play=False,
                       config={"responsive": True, "displaylogo": False})


def chapter_page(nb: nbformat.NotebookNode, stem: str, banner: str) -> nbformat.NotebookNode:
    """The site's page of an executed chapter notebook (`stem`: its file name without .ipynb,
    unique per site; `banner`: Markdown placed under the title)."""
    page = copy.deepcopy(nb)
    figures = 0
    for cell in page.cells:
        if cell.cell_type != "code":
            continue
        cell.source = _without_test_markers(cell.source)
        still = cell.get("metadata", {}).pop(STILL_KEY, None)
        if still is not None and not cell.get("outputs"):
            cell.outputs = [nbformat.from_dict(o) for o in still]
        if any(_is_widget(o) for o in cell.get("outputs", [])):
            # a dashboard's cell: what its controls rendered reached the kernel's output as
            # well (no front end put it inside the dashboard); the still picture holds it
            cell.outputs = [o for o in cell.outputs if _is_widget(o)]
        outputs = []
        for output in cell.get("outputs", []):  # new outputs: one may stand in two places
            data = output.get("data") or {}
            if PLOTLY_MIME in data:
                figures += 1
                html = figure_html(data[PLOTLY_MIME], f"{stem}-figure-{figures}")
                output = nbformat.from_dict({**output, "data": {"text/html": html},
                                             "metadata": {}})
            elif _is_widget(output):
                output = nbformat.from_dict({**output, "metadata": {},
                                             "data": {"text/html": data.get("text/html",
                                                                            NO_STILL)}})
            outputs.append(output)
        cell.outputs = outputs
    _insert_after_title(page, banner)
    # IPython's lexer: cells use IPython syntax (`!torchrun ...`, `%%writefile`)
    page.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    return page


def exercise_page(nb: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The site's page of an exercise notebook `name` (e.g. "05_ddp.ipynb"): no outputs, and
    how to run it under the title."""
    page = copy.deepcopy(nb)
    for cell in page.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    _insert_after_title(page, RUN_EXERCISES.replace("{name}", name))
    return page


def _is_widget(output: Mapping[str, Any]) -> bool:
    """Whether an output shows an ipywidget (a dashboard: its still picture beside it)."""
    return WIDGET_MIME in (output.get("data") or {})


def _without_test_markers(source: str) -> str:
    """The cell's code without nbval's marker comments (# NBVAL_CHECK_OUTPUT and the like)."""
    return "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith("# NBVAL_"))


def _insert_after_title(page: nbformat.NotebookNode, markdown: str) -> None:
    """Put `markdown` right under the page's `# title` line (first, where there is none)."""
    for cell in page.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("# "):
            title, _, rest = cell.source.partition("\n")
            cell.source = f"{title}\n\n{markdown}\n{rest}"
            return
    page.cells.insert(0, nbformat.v4.new_markdown_cell(markdown))
