"""Grouped bars of measured bytes per variant of a run (chapter 6: gradient accumulation
under FSDP2, chapter 8: DDP's compression hooks). A pure builder: numbers in, Figure out."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from dpsim.viz.style import BYTE_UNITS, finish, human_bytes

VARIANT_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#E45756", "#72B7B2")


def variant_bars(values: Mapping[str, Mapping[str, float]], title: str, unit: str = "KiB"
                 ) -> go.Figure:
    """One group of bars per quantity (the inner keys, e.g. "all-gathered"), one bar per
    variant (the outer keys, e.g. a mode of a run); `values` in bytes, drawn in `unit`."""
    scale = BYTE_UNITS[unit]
    quantities = list(dict.fromkeys(q for row in values.values() for q in row))
    fig = go.Figure()
    for i, (variant, row) in enumerate(values.items()):
        y = [row.get(q, 0) for q in quantities]
        fig.add_bar(name=variant, x=quantities, y=[v / scale for v in y],
                    marker_color=VARIANT_COLORS[i % len(VARIANT_COLORS)],
                    hovertext=[f"{variant}: {human_bytes(v)}" for v in y], hoverinfo="text")
    top = max((v for row in values.values() for v in row.values()), default=1) / scale
    fig.update_yaxes(title_text=unit, range=[0, 1.1 * top or 1])
    return finish(fig, title, barmode="group", height=380)
