"""Shared colours, layout and units so every chapter's figures read the same way."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

CATEGORY_COLORS: dict[str, str] = {
    "parameters": "#4C78A8",
    "gradients": "#F58518",
    "optimizer": "#54A24B",
    "activations": "#E45756",
    "buffers": "#B279A2",
    "gathered": "#9D755D",
    "outputs": "#FF9DA6",
    "other": "#BAB0AC",
    "input": "#72B7B2",
    "loss": "#EECA3B",
    "allocated": "#4C78A8",
}

KIND_COLORS: dict[str, str] = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "optimizer": "#54A24B",
    "all_reduce": "#E45756",
    "all_gather": "#72B7B2",
    "reduce_scatter": "#B279A2",
    "broadcast": "#9D755D",
    "scatter": "#FF9DA6",
    "gather": "#EECA3B",
    "python": "#BAB0AC",
    "idle": "#EEEEEE",
    "replicate": "#72B7B2",
    "loss": "#B279A2",
    "reduce": "#E45756",
    "grad_scatter": "#FF9DA6",
    "gil_wait": "#EEEEEE",
    "native": "#C7E9C0",
}

SOURCE_DASH = {"simulated": "dash", "measured": "solid", "re-enacted": "dot"}

# axis units: bytes in one unit, and units in one second
BYTE_UNITS: dict[str, float] = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "GB": 1e9}
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e3, "us": 1e6}


def color_for(name: str) -> str:
    """Colour of a memory category or event kind (grey if unknown)."""
    return CATEGORY_COLORS.get(name) or KIND_COLORS.get(name) or "#BAB0AC"


def finish(fig: go.Figure, title: str, **layout: Any) -> go.Figure:
    """Apply the house layout: title, white template, compact margins."""
    fig.update_layout(
        title=title,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom"},
        **layout,
    )
    return fig


def human_bytes(nbytes: float) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
