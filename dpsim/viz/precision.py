"""Chapter 9 figures: torch's, ZeRO's and Megatron's mixed precision per ZeRO stage;
measured beside predicted bytes (pure builders: numbers in, plotly Figure out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dpsim.viz.style import BYTE_UNITS, color_for, finish

_STATES = (("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer"))
# scheme_table's column prefixes and their names on the figure
_SCHEMES = (("torch", "torch"), ("zero", "ZeRO"), ("megatron", "Megatron"))


def scheme_bars(rows: Sequence[Mapping[str, object]], unit: str = "GB",
                title: str = "Model states per device: torch's, ZeRO's and Megatron's schemes"
                ) -> go.Figure:
    """Stacked bars per ZeRO stage: torch (4+4+8), ZeRO (2+2+12) and Megatron (2+4+12)
    side by side; rows as `precision.scheme_table` returns them."""
    scale = BYTE_UNITS[unit]
    x = [[f"stage {r['stage']}" for r in rows for _ in _SCHEMES],
         [name for _ in rows for _, name in _SCHEMES]]
    fig = go.Figure()
    for key, cat in _STATES:
        y = [float(r[f"{scheme}_{key}_B"]) / scale  # type: ignore[arg-type]
             for r in rows for scheme, _ in _SCHEMES]
        fig.add_bar(name=cat, x=x, y=y, marker_color=color_for(cat),
                    hovertemplate=f"{cat}: %{{y:.3g}} {unit}<extra></extra>")
    fig.update_layout(barmode="stack")
    return finish(fig, title, yaxis_title=unit)


def measured_vs_predicted(pairs: Mapping[str, tuple[float, float]], unit: str = "KiB",
                          title: str = "Measured and predicted bytes") -> go.Figure:
    """Grouped bars: for each label, (measured, predicted) bytes."""
    scale = BYTE_UNITS[unit]
    labels = list(pairs)
    fig = go.Figure()
    for i, (name, color) in enumerate((("measured", "black"), ("predicted", "#888888"))):
        fig.add_bar(name=name, x=labels, y=[pairs[k][i] / scale for k in labels],
                    marker_color=color,
                    hovertemplate=f"{name}: %{{y:.4g}} {unit}<extra>%{{x}}</extra>")
    fig.update_layout(barmode="group")
    return finish(fig, title, yaxis_title=unit)
