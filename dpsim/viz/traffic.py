"""Who sends how much (naive vs ring vs tree), and bandwidth / time per message size.

`traffic_figure` draws bytes sent and received by every rank for one collective under
each algorithm, on a shared axis so the naive root's hotspot stands out.
`bandwidth_figure` draws measured algbw and busbw (nccl-tests definitions) per size;
`prediction_figure` draws a calibrated model's predicted time next to the measured one;
`cost_curves_figure` draws the alpha-beta model's time and busbw per size. The numbers come
from `dpsim.sim.collectives.series` (or a calibration); these builders only draw them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.sim import Link, RankTraffic, SizeSeries
from dpsim.viz.style import SOURCE_DASH, finish, human_bytes

SENT_COLOR, RECEIVED_COLOR = "#4C78A8", "#F58518"
IMPL_COLORS = {"hand": "#E45756", "torch": "#4C78A8"}
IMPL_NAMES = {"hand": "hand-written ring", "torch": "dist.all_reduce"}


def _tick_sizes(sizes: Sequence[int]) -> dict[str, object]:
    return {"tickvals": list(sizes), "ticktext": [human_bytes(s) for s in sizes]}


def traffic_figure(traffic: RankTraffic) -> go.Figure:
    """Bars of bytes sent and received per rank, one panel per algorithm (simulated)."""
    collective, nbytes, world_size = traffic.collective, traffic.nbytes, traffic.world_size
    algorithms = list(traffic.sent)
    fig = make_subplots(rows=1, cols=len(algorithms), shared_yaxes=True,
                        subplot_titles=[f"{a}" for a in algorithms], horizontal_spacing=0.04)
    ranks = list(range(world_size))
    for col, algorithm in enumerate(algorithms, start=1):
        sent, received = traffic.sent[algorithm], traffic.received[algorithm]
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
    if collective == "all_reduce" and "ring" in algorithms:
        col = algorithms.index("ring") + 1
        fig.add_hline(y=traffic.ring_formula_bytes, line={"dash": "dot", "color": "#333"},
                      row=1, col=col, annotation_text="2(N-1)/N S",
                      annotation_position="top left")
    return finish(fig, f"{collective} of {human_bytes(nbytes)} on {world_size} ranks: "
                       "bytes per rank (simulated)", barmode="group", height=380)


def bandwidth_figure(measured: Mapping[str, SizeSeries], world_size: int,
                     title: str = "all-reduce bandwidth, measured on this machine") -> go.Figure:
    """algbw and busbw (GB/s) per message size for each implementation (bandwidth_series)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("algorithm bandwidth (algbw)",
                                                        "bus bandwidth (busbw)"),
                        horizontal_spacing=0.1)
    sizes_all: set[int] = set()
    for impl, series in measured.items():
        sizes = series.sizes_bytes
        sizes_all.update(sizes)
        color = IMPL_COLORS.get(impl, "#54A24B")
        for col, values in ((1, series.algbw_GBps), (2, series.busbw_GBps)):
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


def cost_curves_figure(curves: Mapping[str, SizeSeries], collective: str, world_size: int,
                       link: Link, highlight: tuple[int, float, float] | None = None,
                       highlight_algorithm: str = "ring") -> go.Figure:
    """Simulated time and busbw per message size, one line per algorithm (model_series).

    `highlight` is (bytes, seconds, busbw GB/s) of the chosen setting, marked on both panels.
    """
    fig = make_subplots(rows=1, cols=2, subplot_titles=("time (simulated)",
                                                        "bus bandwidth (simulated)"),
                        horizontal_spacing=0.1)
    colors = {"ring": "#E45756", "tree": "#54A24B", "naive": "#9D755D"}
    sizes_bytes: list[int] = []
    for algorithm, curve in curves.items():
        sizes_bytes = curve.sizes_bytes
        for col, values in ((1, [t * 1e3 for t in curve.time_s]), (2, curve.busbw_GBps)):
            fig.add_trace(go.Scatter(x=list(sizes_bytes), y=values, mode="lines",
                                     name=algorithm, legendgroup=algorithm,
                                     showlegend=col == 1,
                                     line={"color": colors[algorithm],
                                           "width": 4 if algorithm == highlight_algorithm
                                           else 2}), row=1, col=col)
    if highlight is not None:
        highlight_nbytes, t, mark = highlight
        for col, y in ((1, t * 1e3), (2, mark)):
            fig.add_trace(go.Scatter(x=[highlight_nbytes], y=[y], mode="markers",
                                     marker={"size": 12, "color": "black"},
                                     name="your setting", showlegend=col == 1), row=1, col=col)
    fig.add_hline(y=link.bandwidth_GBps, line={"dash": "dot"}, row=1, col=2,
                  annotation_text="link bandwidth", annotation_position="bottom right")
    ticks = _tick_sizes(sizes_bytes[::3])
    fig.update_xaxes(type="log", title_text="message size", **ticks)
    fig.update_yaxes(type="log", title_text="milliseconds", row=1, col=1)
    fig.update_yaxes(title_text="GB/s", rangemode="tozero", row=1, col=2)
    finish(fig, f"{collective} on {world_size} ranks over {link.name} (simulated)", height=420)
    return fig.update_layout(legend_y=-0.3)
