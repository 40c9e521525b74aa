"""DDP figures: a step's timeline (simulated over measured), buckets, step-time breakdown.

Loss curves of the ranks use `dpsim.viz.training.loss_curves`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.strategies.base import StepResult
from dpsim.strategies.ddp import ScalingPoint
from dpsim.trace import Trace
from dpsim.viz.style import color_for, finish, human_bytes

_SEGMENTS = (  # (name, colour) of the stacked step-time bars
    ("compute alone", color_for("backward")),
    ("comm hidden behind compute", "#F2B880"),
    ("exposed comm", color_for("all_reduce")),
)


def timeline(predicted: Trace | None, measured: Trace | None = None, device: int = 0,
             title: str = "One DDP step: compute and gradient all-reduce") -> go.Figure:
    """Gantt rows per source and stream (ms); hover shows layer or bucket and bytes."""
    fig = go.Figure()
    rows: list[str] = []
    seen: set[str] = set()
    notes = []
    for trace in (measured, predicted):  # plotly draws the first category at the bottom
        if trace is None:
            continue
        src = trace.source
        events = trace.filter(device=device)
        for stream in ("comm", "compute"):
            row = f"{src} · {stream}"
            rows.append(row)
            by_kind: dict[str, list[Any]] = {}
            for e in (e for e in events if e.stream == stream):
                by_kind.setdefault(e.kind, []).append(e)
            lanes = _lanes([e for e in events if e.stream == stream])
            width = 0.8 / (max(lanes.values(), default=0) + 1)
            for kind, group in by_kind.items():
                fig.add_trace(go.Bar(
                    orientation="h", y=[row] * len(group), base=[e.start_s * 1e3 for e in group],
                    x=[e.duration_s * 1e3 for e in group], name=kind, legendgroup=kind,
                    width=width, offset=[-0.4 + lanes[id(e)] * width for e in group],
                    showlegend=kind not in seen, marker_color=color_for(kind),
                    marker_line={"width": 0.5, "color": "white"},
                    opacity=1.0 if src == "measured" else 0.75,
                    customdata=[[e.label, human_bytes(e.nbytes) if e.nbytes else ""]
                                for e in group],
                    hovertemplate="%{customdata[0]} %{customdata[1]}<br>"
                                  "%{base:.3f} ms + %{x:.3f} ms<extra>" + f"{src} {kind}</extra>",
                ))
                seen.add(kind)
        if events:
            notes.append(f"{src}: {max(e.end_s for e in events) * 1e3:.2f} ms")
    fig.update_layout(barmode="overlay", bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=rows)
    fig.update_xaxes(title="time from the start of the step (ms)")
    fig = finish(fig, f"{title}<br><sup>step time — {'; '.join(notes)}</sup>",
                 height=230 + 45 * len(rows))
    fig.update_layout(legend_y=-0.45 if len(rows) <= 2 else -0.25)
    return fig


def _lanes(events: Sequence[Any]) -> dict[int, int]:
    """A lane per event so that events overlapping in time (concurrent all-reduces) are
    drawn side by side within their row: id(event) -> lane index (0 when none overlap)."""
    ends: list[float] = []
    out: dict[int, int] = {}
    for e in sorted(events, key=lambda e: (e.start_s, e.end_s)):
        lane = next((i for i, end in enumerate(ends) if end <= e.start_s + 1e-12), len(ends))
        if lane == len(ends):
            ends.append(e.end_s)
        else:
            ends[lane] = e.end_s
        out[id(e)] = lane
    return out


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
    return finish(fig, title, height=380)


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
    fig.update_yaxes(title="efficiency (%)", range=[0, 105], secondary_y=True)
    return finish(fig, title, height=400)


def bucket_sizes(predicted: Sequence[Any], observed: Sequence[Any] | None = None,
                 title: str = "Gradient buckets, in the order they are all-reduced") -> go.Figure:
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
    return finish(fig, title, height=360)
