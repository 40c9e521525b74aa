"""DDP figures: buckets, step-time breakdown, scaling.

A step's timeline (simulated over measured) is `dpsim.viz.timeline.timeline` with lanes;
loss curves of the ranks use `dpsim.viz.training.loss_curves`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.sim import ScalingPoint, StepResult
from dpsim.viz.style import SOURCE_WORDS, STEP_SPLIT_COLORS, color_for, finish, with_source

_SEGMENTS = (  # (name, colour) of the stacked step-time bars, coloured as in every figure
    ("compute alone", STEP_SPLIT_COLORS["compute"]),
    ("comm hidden behind compute", STEP_SPLIT_COLORS["hidden comm"]),
    ("exposed comm", STEP_SPLIT_COLORS["exposed comm"]),
)


def _segments(b: StepResult) -> tuple[float, float, float]:
    """(compute alone, hidden comm, exposed comm) in ms; they add up to the step time."""
    return ((b.compute_s - b.hidden_comm_s) * 1e3, b.hidden_comm_s * 1e3, b.exposed_comm_s * 1e3)


def breakdown_bars(rows: Mapping[str, StepResult],
                   title: str = "Where the step time goes") -> go.Figure:
    """Stacked bars per row label: compute alone, comm hidden behind compute, exposed comm."""
    labels = list(rows)
    fig = go.Figure()
    parts = [_segments(rows[k]) for k in labels]
    for i, (name, colour) in enumerate(_SEGMENTS):
        fig.add_trace(go.Bar(x=labels, y=[p[i] for p in parts], name=name, marker_color=colour,
                             hovertemplate="%{x}: %{y:.3f} ms<extra>" + name + "</extra>"))
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="ms per step")
    return finish(fig, with_source(title, [k for k in labels if k in SOURCE_WORDS]), height=380)


def scaling_figure(points: Sequence[ScalingPoint], title: str = "DDP scaling (simulated)"
                   ) -> go.Figure:
    """Step time split per world size (bars) and scaling efficiency (line, right axis)."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    labels = [str(p.world_size) for p in points]
    parts = [_segments(p.breakdown) for p in points]
    for i, (name, colour) in enumerate(_SEGMENTS):
        fig.add_trace(go.Bar(x=labels, y=[p[i] for p in parts], name=name, marker_color=colour,
                             hovertemplate="N=%{x}: %{y:.2f} ms<extra>" + name + "</extra>"),
                      secondary_y=False)
    fig.add_trace(go.Scatter(x=labels, y=[p.breakdown.scaling_efficiency * 100 for p in points],
                             name="scaling efficiency", mode="lines+markers",
                             line={"color": "black"},
                             hovertemplate="N=%{x}: %{y:.1f} %<extra></extra>"),
                  secondary_y=True)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="world size N (ranks)", type="category")
    fig.update_yaxes(title="ms per step", secondary_y=False)
    fig.update_yaxes(title="efficiency (%)", range=[0, 105], tickmode="linear", tick0=0,
                     dtick=25, showgrid=False, secondary_y=True)  # whole percents
    return finish(fig, title, height=400)


def bucket_sizes(predicted: Sequence[Any], observed: Sequence[Any] | None = None,
                 title: str = "Gradient buckets, in the order they are all-reduced"
                 ) -> go.Figure:
    """Bytes per bucket; items need .index, .nbytes and .params (Bucket, ObservedBucket)."""
    fig = go.Figure()
    for name, buckets, colour in (("simulated", predicted, "#9ecae1"),
                                  ("real DDP", observed, color_for("all_reduce"))):
        if not buckets:
            continue
        fig.add_trace(go.Bar(
            x=[f"bucket {b.index}" for b in buckets], y=[b.nbytes / 1024 for b in buckets],
            name=name, marker_color=colour,
            customdata=[", ".join(b.params) for b in buckets],
            hovertemplate="%{x}: %{y:.1f} KiB<br>%{customdata}<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="KiB")
    sources = ["simulated", *(["measured (real DDP)"] if observed else [])]
    return finish(fig, with_source(title, sources), height=360)
