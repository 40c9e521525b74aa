"""Wire ipywidgets controls to a function that returns figures (or text).

A dashboard shown where no kernel runs (the course's static site, an exported page) cannot
move its controls. So that it is never an empty box there, the box `dashboard` returns also
offers a still picture of what it shows (`text/html`, beside the widget's own view): the
controls' current values, what they rendered, and a line saying to run the notebook in
JupyterLab. JupyterLab prefers the widget view, so the still picture is only seen where
widgets cannot run.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import plotly.io as pio
from IPython.display import display

from dpsim.sim import require_int

STILL_NOTE = ("A dashboard, shown here in one state. Run this notebook in JupyterLab "
              "(<code>make lab</code>) to move its controls.")
STILL_CLASS = "dpsim-dashboard-still"  # the still picture's outer <div>


class _Dashboard(widgets.VBox):
    """A VBox of controls and their output that also carries a still picture of its last
    rendering, as `text/html`, for pages without a kernel."""

    def __init__(self, children: Sequence[widgets.Widget], controls: Mapping[str, Any],
                 shown: list[Any]) -> None:
        super().__init__(list(children))
        self._controls = dict(controls)
        self._shown = shown  # what the last redraw showed: strings and figures

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = _still_html(self._controls, self._shown)
        return bundle


def _still_html(controls: Mapping[str, Any], shown: Sequence[Any]) -> str:
    """The still picture: the note, each control's description and value, then what was
    shown (text as <pre>, figures drawn by plotly.js, which the page loads itself)."""
    settings = ", ".join(
        f"{html.escape(str(getattr(w, 'description', '') or name))} = "
        f"{html.escape(_label(w))}" for name, w in controls.items())
    parts = [f'<div class="{STILL_CLASS}">',
             f'<p class="dpsim-dashboard-note">{STILL_NOTE}</p>',
             f'<p class="dpsim-dashboard-settings">Shown for: {settings}</p>']
    for item in shown:
        if isinstance(item, str):
            parts.append(f"<pre>{html.escape(item)}</pre>")
        else:
            parts.append(pio.to_html(item, include_plotlyjs=False, full_html=False,
                                     default_width="100%", auto_play=False,
                                     config={"responsive": True}))
    parts.append("</div>")
    return "\n".join(parts)


def _label(control: Any) -> str:
    """A control's value as its user reads it: a selection's label, not its value (read
    from `options` and `index`: ipywidgets leaves `label` empty when the value is 0)."""
    index, options = getattr(control, "index", None), getattr(control, "options", None)
    if isinstance(index, int) and options is not None:
        option = list(options)[index]
        return str(option[0] if isinstance(option, tuple) else option)
    return str(control.value)


def dashboard(controls: Mapping[str, widgets.Widget], render: Callable[..., Any],
              columns: int = 3, header: Sequence[widgets.Widget] = ()) -> widgets.VBox:
    """Controls on top, `render(**values)` output below, redrawn on every change.

    `render` may return a plotly Figure, a string, or a list of them; `columns` controls a
    row; `header` widgets (e.g. a preset chooser that sets the controls) go above them.
    """
    if not isinstance(controls, Mapping) or not all(
            isinstance(k, str) and isinstance(w, widgets.ValueWidget) for k, w in controls.items()):
        raise ValueError(f"controls={controls!r} is not allowed; give a mapping from each "
                         "argument name of `render` to an ipywidgets control")
    if not callable(render):
        raise ValueError(f"render={render!r} is not callable; give a function of the controls")
    require_int("columns", columns, 1)
    if not all(isinstance(w, widgets.Widget) for w in header):
        raise ValueError(f"header={header!r} is not allowed; give a list of ipywidgets")
    out = widgets.Output()
    shown: list[Any] = []

    def redraw(**values: Any) -> None:
        result = render(**values)
        items = list(result) if isinstance(result, (list, tuple)) else [result]
        shown[:] = items
        with out:
            out.clear_output(wait=True)
            for item in items:
                if isinstance(item, str):
                    print(item)
                else:
                    display(item)

    linked = widgets.interactive_output(redraw, dict(controls))
    wrap = widgets.Layout(flex_flow="row wrap")  # a narrow window wraps, never scrolls
    rows = [widgets.HBox(list(controls.values())[i:i + columns], layout=wrap)
            for i in range(0, len(controls), columns)]
    box = _Dashboard([*header, *rows, out, linked], controls, shown)
    box.add_class("dpsim-dashboard")
    return box
