"""Memory per device through a step, stacked by category (any strategy's Trace).

`memory_per_device` draws one panel per device with the bytes of each category over
time; `peak_per_device` draws each device's peak as a stacked bar; `bytes_at` reads the
bytes per category every device holds at a moment (used by other figures too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.sim import Trace
from dpsim.viz.style import BYTE_UNITS, color_for, finish

ORDER = ("parameters", "gradients", "optimizer", "input", "activations", "outputs",
         "gathered", "loss", "allocated")


def category_color(category: str) -> str:
    """The house colour of a memory category."""
    return color_for(category)


def categories(trace: Trace) -> list[str]:
    """Memory categories present in `trace`, in a fixed reading order."""
    present = {m.category for m in trace.memory}
    return [c for c in ORDER if c in present] + sorted(present - set(ORDER))


def bytes_at(trace: Trace, time_s: float, devices: Sequence[int] | None = None
             ) -> dict[int, dict[str, int]]:
    """Bytes per category each device holds at `time_s` (the last sample at or before it)."""
    out: dict[int, dict[str, int]] = {}
    for d in devices if devices is not None else trace.devices:
        held: dict[str, int] = {}
        for t, cats in trace.memory_timeline(d):
            if t > time_s + 1e-12:
                break
            held = cats
        out[d] = dict(held)
    return out


def memory_per_device(trace: Trace, devices: Sequence[int] | None = None, unit: str = "MiB",
                      title: str = "Memory per device through the step",
                      max_columns: int = 4) -> go.Figure:
    """One panel per device: stacked bytes per category over time (ms), shared axes."""
    scale = BYTE_UNITS[unit]
    devs = list(devices) if devices is not None else trace.devices
    if not devs:
        raise ValueError("the trace has no memory samples; give a trace with memory")
    cols = min(max_columns, len(devs))
    rows = math.ceil(len(devs) / cols)
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, shared_yaxes=True,
                        subplot_titles=[f"device {d}" for d in devs],
                        vertical_spacing=0.12 if rows > 1 else 0.1, horizontal_spacing=0.04)
    cats = categories(trace)
    end_ms = trace.end_s * 1e3
    shown: set[str] = set()
    for pos, d in enumerate(devs):
        points = trace.memory_timeline(d)
        times = [t * 1e3 for t, _ in points] + [end_ms]
        for cat in cats:
            values = [c.get(cat, 0) / scale for _, c in points]
            if not any(values):
                continue
            fig.add_scatter(x=times, y=values + values[-1:], name=cat, legendgroup=cat,
                            showlegend=cat not in shown,
                            stackgroup=f"dev{d}", mode="lines",
                            line={"shape": "hv", "color": category_color(cat), "width": 0.5},
                            hovertemplate=f"{cat}: %{{y:.3f}} {unit}<extra>device {d}</extra>",
                            row=pos // cols + 1, col=pos % cols + 1)
            shown.add(cat)
    fig.update_xaxes(title_text="ms", row=rows)
    fig.update_yaxes(title_text=unit, col=1)
    fig.update_layout(height=240 * rows + 120)
    return finish(fig, f"{title} ({trace.source})")


def peak_per_device(trace: Trace, devices: Sequence[int] | None = None, unit: str = "MiB",
                    title: str = "Peak memory per device", limit_bytes: int | None = None
                    ) -> go.Figure:
    """Stacked bars: each device's bytes per category at the moment of its own peak."""
    scale = BYTE_UNITS[unit]
    devs = list(devices) if devices is not None else trace.devices
    peaks = {d: trace.memory_at_peak(d) for d in devs}
    names = [f"device {d}" for d in devs]
    fig = go.Figure()
    for cat in categories(trace):
        values = [peaks[d].get(cat, 0) / scale for d in devs]
        if any(values):
            fig.add_bar(name=cat, x=names, y=values, marker_color=category_color(cat),
                        hovertemplate=f"{cat}: %{{y:.3f}} {unit}<extra>%{{x}}</extra>")
    if limit_bytes:
        fig.add_hline(y=limit_bytes / scale, line_dash="dash", line_color="red",
                      annotation_text="device memory")
    fig.update_layout(barmode="stack")
    return finish(fig, f"{title} ({trace.source})", yaxis_title=unit)
