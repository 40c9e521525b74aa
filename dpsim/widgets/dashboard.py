"""Wire ipywidgets controls to a function that returns figures (or text)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as widgets
from IPython.display import display


def dashboard(controls: Mapping[str, widgets.Widget], render: Callable[..., Any],
              columns: int = 3) -> widgets.VBox:
    """Controls on top, `render(**values)` output below, redrawn on every change.

    `render` may return a plotly Figure, a string, or a list of them.
    """
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
    rows = [widgets.HBox(list(controls.values())[i:i + columns])
            for i in range(0, len(controls), columns)]
    box = widgets.VBox([*rows, out, linked])
    box.add_class("dpsim-dashboard")
    return box
