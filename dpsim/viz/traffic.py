"""Who sends how much (naive vs ring vs tree), and bandwidth / time per message size.

`traffic_figure` draws bytes sent and received by every rank for one collective under
each algorithm, on a shared axis so the naive root's hotspot stands out.
`bandwidth_figure` draws measured algbw and busbw (nccl-tests definitions) per size;
`prediction_figure` draws a calibrated model's predicted time next to the measured one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.collectives.cost import (
    ALGORITHMS,
    algbw_GBps,
    busbw_GBps,
    bytes_received_per_rank,
    bytes_sent_per_rank,
    collective_time_s,
)
from dpsim.hardware import Link
from dpsim.viz.style import SOURCE_DASH, finish, human_bytes

SENT_COLOR, RECEIVED_COLOR = "#4C78A8", "#F58518"
IMPL_COLORS = {"hand": "#E45756", "torch": "#4C78A8"}
IMPL_NAMES = {"hand": "hand-written ring", "torch": "dist.all_reduce"}


def _tick_sizes(sizes: Sequence[int]) -> dict[str, object]:
    return {"tickvals": list(sizes), "ticktext": [human_bytes(s) for s in sizes]}


def traffic_figure(nbytes: int, world_size: int, collective: str = "all_reduce",
                   algorithms: Sequence[str] = ("naive", "tree", "ring")) -> go.Figure:
    """Bars of bytes sent and received per rank, one panel per algorithm (simulated)."""
    for algorithm in algorithms:
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={algorithm!r} is not known; allowed: "
                             + ", ".join(repr(a) for a in ALGORITHMS))
    fig = make_subplots(rows=1, cols=len(algorithms), shared_yaxes=True,
                        subplot_titles=[f"{a}" for a in algorithms], horizontal_spacing=0.04)
    ranks = list(range(world_size))
    for col, algorithm in enumerate(algorithms, start=1):
        sent = bytes_sent_per_rank(collective, nbytes, world_size, algorithm)
        received = bytes_received_per_rank(collective, nbytes, world_size, algorithm)
        for name, values, color in (("sent", sent, SENT_COLOR),
                                    ("received", received, RECEIVED_COLOR)):
            fig.add_trace(go.Bar(x=ranks, y=values, name=f"bytes {name}", marker_color=color,
                                 legendgroup=name, showlegend=col == 1,
                                 hovertext=[f"rank {r} {name} {human_bytes(v)} ({algorithm})"
                                            for r, v in zip(ranks, values, strict=True)],
                                 hoverinfo="text"), row=1, col=col)
        fig.update_xaxes(title_text="rank", dtick=1 if world_size <= 16 else None,
                         row=1, col=col)
    fig.update_yaxes(title_text="bytes per rank", row=1, col=1)
    ref = 2 * (world_size - 1) / world_size * nbytes
    if collective == "all_reduce" and "ring" in algorithms:
        col = list(algorithms).index("ring") + 1
        fig.add_hline(y=ref, line={"dash": "dot", "color": "#333"}, row=1, col=col,
                      annotation_text="2(N-1)/N S", annotation_position="top left")
    return finish(fig, f"{collective} of {human_bytes(nbytes)} on {world_size} ranks: "
                       "bytes per rank (simulated)", barmode="group", height=380)


def bandwidth_figure(measured: Mapping[str, Mapping[int, float]], world_size: int,
                     collective: str = "all_reduce",
                     title: str = "all-reduce bandwidth, measured on this machine") -> go.Figure:
    """algbw and busbw (GB/s) per message size for each implementation's measured times."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("algorithm bandwidth (algbw)",
                                                        "bus bandwidth (busbw)"),
                        horizontal_spacing=0.1)
    sizes_all: set[int] = set()
    for impl, per_size in measured.items():
        sizes = sorted(per_size)
        sizes_all.update(sizes)
        alg = [algbw_GBps(s, per_size[s]) for s in sizes]
        bus = [busbw_GBps(collective, s, world_size, per_size[s]) for s in sizes]
        color = IMPL_COLORS.get(impl, "#54A24B")
        for col, values in ((1, alg), (2, bus)):
            fig.add_trace(go.Scatter(x=sizes, y=values, mode="lines+markers",
                                     name=IMPL_NAMES.get(impl, impl), legendgroup=impl,
                                     showlegend=col == 1, line={"color": color}),
                          row=1, col=col)
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="message size", row=1, col=col,
                         **_tick_sizes(sorted(sizes_all)))
        fig.update_yaxes(title_text="GB/s", rangemode="tozero", row=1, col=col)
    return finish(fig, f"{title} ({world_size} ranks)", height=380)


def prediction_figure(sizes_bytes: Sequence[int], measured_s: Sequence[float],
                      predicted_s: Sequence[float], title: str = "all-reduce time") -> go.Figure:
    """Measured and predicted seconds per size (log-log), errors in the hover text."""
    fig = go.Figure()
    errors = [abs(p - m) / m for p, m in zip(predicted_s, measured_s, strict=True)]
    fig.add_trace(go.Scatter(x=list(sizes_bytes), y=[m * 1e3 for m in measured_s],
                             mode="lines+markers", name="measured",
                             line={"dash": SOURCE_DASH["measured"], "color": "#4C78A8"}))
    fig.add_trace(go.Scatter(x=list(sizes_bytes), y=[p * 1e3 for p in predicted_s],
                             mode="lines+markers", name="predicted (calibrated alpha-beta)",
                             line={"dash": SOURCE_DASH["simulated"], "color": "#E45756"},
                             hovertext=[f"error {100 * e:.0f}%" for e in errors],
                             hoverinfo="text+y"))
    fig.update_xaxes(type="log", title_text="message size", **_tick_sizes(sizes_bytes))
    fig.update_yaxes(type="log", title_text="milliseconds")
    return finish(fig, title, height=380)


def cost_curves_figure(collective: str, world_size: int, link: Link,
                       sizes_bytes: Sequence[int], highlight_nbytes: int | None = None,
                       highlight_algorithm: str = "ring") -> go.Figure:
    """Simulated time and busbw per message size for every algorithm (alpha-beta model)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time (simulated)",
                                                        "bus bandwidth (simulated)"),
                        horizontal_spacing=0.1)
    colors = {"ring": "#E45756", "tree": "#54A24B", "naive": "#9D755D"}
    for algorithm in ALGORITHMS:
        times = [collective_time_s(collective, s, world_size, link, algorithm)
                 for s in sizes_bytes]
        bus = [busbw_GBps(collective, s, world_size, t) if t > 0 else 0.0
               for s, t in zip(sizes_bytes, times, strict=True)]
        for col, values in ((1, [t * 1e3 for t in times]), (2, bus)):
            fig.add_trace(go.Scatter(x=list(sizes_bytes), y=values, mode="lines",
                                     name=algorithm, legendgroup=algorithm,
                                     showlegend=col == 1,
                                     line={"color": colors[algorithm],
                                           "width": 4 if algorithm == highlight_algorithm
                                           else 2}), row=1, col=col)
    if highlight_nbytes is not None:
        t = collective_time_s(collective, highlight_nbytes, world_size, link,
                              highlight_algorithm)
        mark = busbw_GBps(collective, highlight_nbytes, world_size, t) if t > 0 else 0.0
        for col, y in ((1, t * 1e3), (2, mark)):
            fig.add_trace(go.Scatter(x=[highlight_nbytes], y=[y], mode="markers",
                                     marker={"size": 12, "color": "black"},
                                     name="your setting", showlegend=col == 1), row=1, col=col)
    fig.add_hline(y=link.bandwidth_GBps, line={"dash": "dot"}, row=1, col=2,
                  annotation_text="link bandwidth", annotation_position="bottom right")
    ticks = _tick_sizes(list(sizes_bytes)[::3])
    fig.update_xaxes(type="log", title_text="message size", **ticks)
    fig.update_yaxes(type="log", title_text="milliseconds", row=1, col=1)
    fig.update_yaxes(title_text="GB/s", rangemode="tozero", row=1, col=2)
    finish(fig, f"{collective} on {world_size} ranks over {link.name}", height=420)
    return fig.update_layout(legend_y=-0.3)
