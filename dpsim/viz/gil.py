"""GIL figures: who holds the GIL when (per thread), and speed-up against worker count."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dpsim.sim import Trace
from dpsim.viz.style import TIME_UNITS, finish
from dpsim.viz.table import Column, text_table

THREAD_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#B279A2", "#72B7B2",
                 "#EECA3B", "#9D755D")
KIND_STYLE = {  # event kind -> (legend name, opacity, pattern)
    "python": ("holds the GIL (runs Python)", 1.0, ""),
    "native": ("runs C code (GIL released)", 0.35, ""),
    "gil_wait": ("waits for the GIL", 0.25, "x"),
}


def gil_timeline(trace: Trace, title: str = "Who holds the GIL", unit: str = "ms",
                 max_events: int = 4000) -> go.Figure:
    """One row per thread: intervals holding the GIL, running GIL-free code, or waiting.

    Works for measured traces (runtime.gil_measure.python_timeline) and simulated ones
    (gil.schedule / gil.simulate); the switch interval is marked when the trace has it.
    """
    scale = TIME_UNITS[unit]
    events = [e for e in trace.events if e.kind in KIND_STYLE][:max_events]
    if not events:
        raise ValueError("the trace has no GIL events (python, native, gil_wait)")
    threads = sorted({e.device for e in events})
    fig = go.Figure()
    shown: set[str] = set()
    for kind, (name, opacity, pattern) in KIND_STYLE.items():
        for th in threads:
            evs = [e for e in events if e.kind == kind and e.device == th]
            if not evs:
                continue
            fig.add_bar(x=[e.duration_s * scale for e in evs],
                        base=[e.start_s * scale for e in evs],
                        y=[f"thread {th}"] * len(evs), orientation="h", name=name,
                        legendgroup=kind, showlegend=kind not in shown,
                        marker={"color": THREAD_COLORS[th % len(THREAD_COLORS)],
                                "opacity": opacity, "pattern_shape": pattern},
                        hovertemplate=f"{name}<br>%{{base:.3f}} {unit} for %{{x:.3f}} {unit}"
                                      f"<extra>thread {th}</extra>")
            shown.add(kind)
    lo = min(e.start_s for e in events) * scale
    hi = max(e.start_s + e.duration_s for e in events) * scale
    fig.update_xaxes(range=[lo - 0.02 * (hi - lo or 1), hi + 0.02 * (hi - lo or 1)])
    interval = trace.meta.get("switch_interval_s")
    sub = f" · switch interval {interval * scale:g} {unit}" if interval else ""
    fig.update_layout(barmode="overlay", height=140 + 45 * len(threads))
    fig.update_yaxes(categoryorder="array", categoryarray=[f"thread {t}" for t in
                                                           reversed(threads)])
    finish(fig, f"{title} ({trace.source}{sub})", xaxis_title=unit)
    fig.update_layout(legend={"orientation": "h", "yref": "paper", "y": 1.0,
                              "yanchor": "bottom", "x": 1.0,
                              "xanchor": "right"}, margin={"t": 80})
    return fig


def speedup_chart(series: Mapping[str, tuple[Sequence[int], Sequence[float]]],
                  title: str = "Speed-up against the number of workers",
                  ideal: bool = True) -> go.Figure:
    """Lines of speed-up per worker count; names with "simulated" or "predicted" are dashed.

    `series` maps a name (e.g. "python, threads (measured)") to (counts, speed-ups).
    """
    fig = go.Figure()
    top = 1
    for i, (name, (counts, speedups)) in enumerate(series.items()):
        dashed = "simulated" in name or "predicted" in name
        fig.add_scatter(x=list(counts), y=list(speedups), name=name,
                        mode="lines+markers", line={"dash": "dash" if dashed else "solid",
                                                    "color": THREAD_COLORS[i % 8]},
                        hovertemplate="%{x} workers: %{y:.2f}x<extra>" + name + "</extra>")
        top = max(top, *counts)
    if ideal:
        fig.add_scatter(x=[1, top], y=[1, top], name="ideal (N x)", mode="lines",
                        line={"color": "#BBBBBB", "dash": "dot"})
    fig.add_hline(y=1.0, line_color="#888888", line_width=1)
    counts_shown = sorted({c for counts, _ in series.values() for c in counts})
    fig.update_xaxes(tickvals=counts_shown)  # whole workers only
    return finish(fig, title, xaxis_title="workers (threads or processes)",
                  yaxis_title="speed-up (x)")


SCALING_COLUMNS = (
    Column("workload", "workload"), Column("kind", "run by"), Column("workers", "workers", "d"),
    Column("time_ms", "time (ms, measured)", ".1f"), Column("speedup", "speedup (x)", ".2f"),
)


def scaling_text(rows: Sequence[Mapping[str, object]]) -> str:
    """Rows of `measure_scaling(...).rows()` as an aligned table with units."""
    return text_table(list(rows), list(SCALING_COLUMNS))
