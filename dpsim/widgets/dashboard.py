"""Wire ipywidgets controls to a function that returns figures (or text)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets
from IPython.display import display

from dpsim.sim.validation import require_int


def dashboard(controls: Mapping[str, widgets.Widget], render: Callable[..., Any],
              columns: int = 3) -> widgets.VBox:
    """Controls on top, `render(**values)` output below, redrawn on every change.

    `render` may return a plotly Figure, a string, or a list of them; `columns` controls a row.
    """
    if not isinstance(controls, Mapping) or not all(
            isinstance(k, str) and isinstance(w, widgets.ValueWidget) for k, w in controls.items()):
        raise ValueError(f"controls={controls!r} is not allowed; give a mapping from each "
                         "argument name of `render` to an ipywidgets control")
    if not callable(render):
        raise ValueError(f"render={render!r} is not callable; give a function of the controls")
    require_int("columns", columns, 1)
    out = widgets.Output()

    def redraw(**values: Any) -> None:
        result = render(**values)
        items = result if isinstance(result, (list, tuple)) else [result]
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
    box = widgets.VBox([*rows, out, linked])
    box.add_class("dpsim-dashboard")
    return box
