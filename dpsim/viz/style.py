"""Shared colours, layout and units so every chapter's figures read the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

CATEGORY_COLORS: dict[str, str] = {
    "parameters": "#4C78A8",
    "gradients": "#F58518",
    "optimizer": "#54A24B",
    "activations": "#E45756",
    "buffers": "#D4A6C8",
    "gathered": "#9D755D",
    "outputs": "#FF9DA6",
    "other": "#BAB0AC",
    "input": "#72B7B2",
    "loss": "#B279A2",
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
    "grad_scatter": "#9D755D",
    "gil_wait": "#EEEEEE",
    "native": "#C7E9C0",
}

# Where a step's time goes (DDP breakdown, planner): one colour per part in every figure.
# Compute is slate (not the forward or backward colour: it is both), communication red.
STEP_SPLIT_COLORS: dict[str, str] = {
    "compute": "#5B6C7D",
    "hidden comm": "#F4A6A5",
    "exposed comm": "#E45756",
    "host / GIL": "#BAB0AC",
}

# Where a figure's numbers come from; every figure's title names one (tests.support.figure_checks).
# "torch source" is the myths lab's kind of evidence read from the installed torch.
SOURCE_WORDS = ("measured", "re-enacted", "simulated", "published", "recorded", "torch source")

SOURCE_DASH = {"simulated": "dash", "measured": "solid", "re-enacted": "dot"}

# axis units: bytes in one unit, and units in one second
BYTE_UNITS: dict[str, float] = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "GB": 1e9}
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e3, "us": 1e6}


def with_source(title: str, sources: Sequence[str]) -> str:
    """`title`, with the traces' sources appended when it names none: 'Step' ->
    'Step (simulated vs measured)'."""
    if any(word in title.lower() for word in SOURCE_WORDS) or not sources:
        return title
    return f"{title} ({' vs '.join(dict.fromkeys(sources))})"


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


def limit_line(x: Sequence[Any], value: float, label: str, **axes: str) -> go.Scatter:
    """A dashed red line at `value` across `x` (a device's memory), named in the legend, so
    its label never sits on a bar's own label."""
    return go.Scatter(x=[x[0], x[-1]], y=[value, value], mode="lines", name=label,
                      line={"color": "red", "dash": "dash", "width": 1.5}, hoverinfo="name",
                      **axes)


FAR_BELOW = 0.15  # data under this share of a limit: the limit line would flatten it


def add_limit(fig: go.Figure, x: Sequence[Any], top: float, limit: float, unit: str) -> str:
    """Draw the device's memory `limit` as a line when the data (`top`, its largest value)
    comes near it; otherwise leave it out, so the data is not flattened, and return the
    words to put in the title instead ('' when the line is drawn)."""
    if top >= FAR_BELOW * limit:
        fig.add_trace(limit_line(x, limit, f"device memory ({limit:g} {unit})"))
        return ""
    return f" (device memory {limit:g} {unit}: far from full)"


def human_bytes(nbytes: float) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
