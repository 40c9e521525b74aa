"""Chapter 10 figures: bytes each rank wrote to a sharded checkpoint, HSDP traffic per mesh
dimension, and the timeline of an elastic job that lost a rank and caught up.

Pure builders: they draw the numbers and events they are given (from
`labs.ch10_failures`: `dcp_reshard`, `hsdp_train`, `elastic`) and compute nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from dpsim.viz.style import finish, human_bytes, with_source

MEASURED, PREDICTED, OVERHEAD = "#4C78A8", "#F58518", "#BAB0AC"
ATTEMPT_COLORS = ("#4C78A8", "#54A24B", "#B279A2", "#E45756")
MARKERS = {"killed": ("x", "#E45756"), "checkpoint": ("diamond", "#333333"),
           "resume": ("triangle-right", "#54A24B"), "start": ("circle-open", "#777777"),
           "done": ("star", "#333333")}


def written_bytes_figure(file_bytes: Sequence[int], tensor_bytes: Sequence[int],
                         predicted: Sequence[int], title: str) -> go.Figure:
    """Per rank: tensor bytes in its checkpoint file (measured), the prediction beside it,
    and the file's remaining bytes (the container around each tensor) stacked on top."""
    ranks = list(range(len(file_bytes)))
    rest = [f - t for f, t in zip(file_bytes, tensor_bytes, strict=True)]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=ranks, y=list(tensor_bytes), name="tensor bytes (measured)",
                         marker_color=MEASURED, offsetgroup="m",
                         hovertext=[human_bytes(v) for v in tensor_bytes], hoverinfo="text"))
    fig.add_trace(go.Bar(x=ranks, y=rest, base=list(tensor_bytes), offsetgroup="m",
                         name="file container (measured)", marker_color=OVERHEAD,
                         hovertext=[human_bytes(v) for v in rest], hoverinfo="text"))
    fig.add_trace(go.Bar(x=ranks, y=list(predicted), name="tensor bytes (predicted)",
                         marker_color=PREDICTED, offsetgroup="p",
                         hovertext=[human_bytes(v) for v in predicted], hoverinfo="text"))
    fig.update_xaxes(title_text="rank", dtick=1)
    fig.update_yaxes(title_text="bytes written")
    return finish(fig, with_source(title, ["measured", "simulated"]), barmode="group",
                  height=360)


def mesh_traffic_figure(measured: Mapping[str, Mapping[str, int]],
                        predicted: Mapping[str, Mapping[str, int]], title: str) -> go.Figure:
    """Bytes handed to each collective of one step, per mesh dimension: measured beside
    predicted (one rank; every rank is the same)."""
    labels = [f"{dim}: {op}" for dim, ops in predicted.items() for op in ops]
    want = [n for ops in predicted.values() for n in ops.values()]
    got = [measured.get(dim, {}).get(op, 0) for dim, ops in predicted.items() for op in ops]
    fig = go.Figure([
        go.Bar(x=labels, y=got, name="measured", marker_color=MEASURED),
        go.Bar(x=labels, y=want, name="predicted", marker_color=PREDICTED)])
    fig.update_yaxes(title_text="bytes per step")
    return finish(fig, with_source(title, ["measured", "simulated"]), barmode="group",
                  height=340)


def elastic_timeline_figure(events: Sequence[Mapping[str, Any]], title: str) -> go.Figure:
    """Each rank's steps over wall time (seconds since the first event), coloured by
    attempt; markers for start, checkpoint, kill, resume and done."""
    if not events:
        return finish(go.Figure(), f"{title} (no events)", height=300)
    t0 = min(float(e["t"]) for e in events)
    fig = go.Figure()
    for attempt in sorted({int(e["attempt"]) for e in events}):
        steps = [e for e in events if e["event"] == "step" and int(e["attempt"]) == attempt]
        fig.add_trace(go.Scatter(
            x=[float(e["t"]) - t0 for e in steps], y=[f"rank {e['rank']}" for e in steps],
            mode="markers+text", text=[str(e["step"]) for e in steps],
            textposition="top center", name=f"steps, attempt {attempt}",
            marker={"symbol": "square", "size": 9,
                    "color": ATTEMPT_COLORS[attempt % len(ATTEMPT_COLORS)]}))
    for kind, (symbol, color) in MARKERS.items():
        marks = [e for e in events if e["event"] == kind]
        if marks:
            fig.add_trace(go.Scatter(
                x=[float(e["t"]) - t0 for e in marks], y=[f"rank {e['rank']}" for e in marks],
                mode="markers", name=kind, marker={"symbol": symbol, "size": 13,
                                                   "color": color},
                hovertext=[f"{kind} at step {e['step']}, attempt {e['attempt']}"
                           for e in marks], hoverinfo="text"))
    fig.update_xaxes(title_text="seconds since the job started")
    fig.update_yaxes(categoryorder="category descending")
    return finish(fig, with_source(title, ["measured"]), height=320)
