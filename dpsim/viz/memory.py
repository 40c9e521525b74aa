"""Memory figures: predicted vs measured breakdown, and memory against batch size."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dpsim.sim import CATEGORIES, MemoryBreakdown
from dpsim.viz.style import (
    BYTE_UNITS,
    SOURCE_WORDS,
    color_for,
    finish,
    limit_line,
    with_source,
)


def breakdown_bars(columns: Mapping[str, MemoryBreakdown], title: str = "Memory per category",
                   unit: str = "MiB") -> go.Figure:
    """Stacked bars, one per column (e.g. {"predicted": ..., "measured": ...})."""
    scale = BYTE_UNITS[unit]
    fig = go.Figure()
    names = list(columns)
    for cat in CATEGORIES:
        values = [getattr(columns[n], cat) / scale for n in names]
        fig.add_bar(name=cat, x=names, y=values, marker_color=color_for(cat),
                    hovertemplate=f"{cat}: %{{y:.3f}} {unit}<extra>%{{x}}</extra>")
    fig.update_layout(barmode="stack")
    return finish(fig, with_source(title, [n for n in names if n in SOURCE_WORDS]),
                  yaxis_title=unit)


def memory_vs_batch(batch_sizes: Sequence[int], predicted: Sequence[MemoryBreakdown],
                    measured: Mapping[int, MemoryBreakdown] | None = None,
                    limit_bytes: int | None = None, title: str = "Memory vs batch size",
                    unit: str = "MiB") -> go.Figure:
    """Stacked areas of predicted bytes per category; measured totals as markers."""
    scale = BYTE_UNITS[unit]
    fig = go.Figure()
    for cat in CATEGORIES:
        fig.add_scatter(x=list(batch_sizes), y=[getattr(p, cat) / scale for p in predicted],
                        name=f"{cat} (simulated)", stackgroup="one", mode="lines",
                        line={"color": color_for(cat)})
    if measured:
        xs = sorted(measured)
        fig.add_scatter(x=xs, y=[measured[b].total / scale for b in xs], name="total (measured)",
                        mode="markers", marker={"color": "black", "size": 9, "symbol": "x"})
    if limit_bytes:
        fig.add_hline(y=limit_bytes / scale, line_dash="dash", line_color="red",
                      annotation_text="device memory")
    source = "simulated; measured totals as crosses" if measured else "simulated"
    return finish(fig, with_source(title, [source]), xaxis_title="batch size",
                  yaxis_title=unit)


def fit_chart(rows: Sequence[dict[str, object]], limit_GiB: float,
              title: str = "Does it fit?") -> go.Figure:
    """Bars of GiB per model/precision row with the device limit; rows: name, GiB, fits."""
    fig = go.Figure()
    fig.add_bar(x=[r["name"] for r in rows], y=[r["GiB"] for r in rows],
                marker_color=["#54A24B" if r["fits"] else "#E45756" for r in rows],
                text=["fits" if r["fits"] else "out of memory" for r in rows],
                textposition="outside", name="model states + activations")
    fig.add_trace(limit_line([r["name"] for r in rows], limit_GiB,
                             f"device memory ({limit_GiB:g} GiB)"))
    values = [float(str(r["GiB"])) for r in rows if float(str(r["GiB"])) > 0] + [limit_GiB]
    low, high = math.log10(min(values)), math.log10(max(values))
    fig.update_yaxes(type="log", range=[low - 0.3, high + 0.5])
    return finish(fig, title, yaxis_title="GiB (log scale)")
