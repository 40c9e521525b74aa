"""FSDP and ZeRO figures: timelines per unit, memory over time, ZeRO bars, shards, traffic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.sim import MemoryBreakdown, Trace
from dpsim.viz.style import (
    BYTE_UNITS,
    CATEGORY_COLORS,
    TIME_UNITS,
    add_limit,
    color_for,
    finish,
    with_source,
)
from dpsim.viz.timeline import timeline

ORDER = ("parameters", "optimizer", "gradients", "gathered", "activations", "other")


def fsdp_timeline(traces: Mapping[str, Trace], title: str = "FSDP step, unit by unit",
                  unit: str = "ms", devices: Sequence[int] | None = None) -> go.Figure:
    """Bars per (trace name, device, stream): compute per unit, all-gathers, reduce-scatters.

    `traces` maps a row name ("prefetch on", "measured") to a Trace; hover shows the unit.
    """
    return timeline(traces, title=title, unit=unit, devices=devices)


def memory_timelines(traces: Mapping[str, Trace], device: int = 0, unit: str = "GiB",
                     title: str = "Memory over the step", time_unit: str = "ms",
                     limit_bytes: int | None = None) -> go.Figure:
    """Stacked bytes per category over time, one panel per trace (same device)."""
    scale, tscale = BYTE_UNITS[unit], TIME_UNITS[time_unit]
    names = list(traces)
    fig = make_subplots(rows=len(names), cols=1, subplot_titles=names, vertical_spacing=0.12)
    for row, name in enumerate(names, start=1):
        points = traces[name].memory_timeline(device)
        cats = [c for c in ORDER if any(c in d for _, d in points)]
        xs = [t * tscale for t, _ in points]
        for cat in cats:
            fig.add_scatter(x=xs, y=[d.get(cat, 0) / scale for _, d in points], name=cat,
                            stackgroup=f"s{row}", legendgroup=cat, showlegend=row == 1,
                            line={"shape": "hv", "color": color_for(cat)}, row=row, col=1)
        if limit_bytes:
            fig.add_hline(y=limit_bytes / scale, line_dash="dash", line_color="red", row=row,
                          col=1)
        fig.update_yaxes(title_text=unit, row=row, col=1)
    fig.update_xaxes(title_text=time_unit, row=len(names), col=1)
    fig.update_layout(height=220 + 230 * len(names))
    return finish(fig, with_source(title, [traces[n].source for n in names]))


def zero_bars(columns: Mapping[str, Mapping[str, int]], limit_bytes: int | None = None,
              unit: str = "GB", title: str = "Memory per device under each ZeRO stage"
              ) -> go.Figure:
    """Stacked bars of bytes per category per column; columns over the limit are marked."""
    scale = BYTE_UNITS[unit]
    names = list(columns)
    cats = [c for c in ORDER if any(columns[n].get(c, 0) for n in names)]
    fig = go.Figure()
    for cat in cats:
        fig.add_bar(name=cat, x=names, y=[columns[n].get(cat, 0) / scale for n in names],
                    marker_color=CATEGORY_COLORS.get(cat, "#BAB0AC"),
                    hovertemplate=f"{cat}: %{{y:.2f}} {unit}<extra>%{{x}}</extra>")
    totals = [sum(columns[n].values()) / scale for n in names]
    over = [limit_bytes is not None and t * scale > limit_bytes for t in totals]
    fig.add_scatter(x=names, y=totals, mode="text", showlegend=False, textposition="top center",
                    text=[f"{t:.1f} {unit}" + (" ✗ out of memory" if o else "")
                          for t, o in zip(totals, over, strict=True)],
                    textfont={"color": ["#E45756" if o else "#333333" for o in over]})
    note = add_limit(fig, names, max(totals), limit_bytes / scale, unit) if limit_bytes else ""
    shown = max(totals) if note or not limit_bytes else max(*totals, limit_bytes / scale)
    fig.update_layout(barmode="stack", yaxis_range=[0, shown * 1.2 or 1])
    return finish(fig, title + note, yaxis_title=unit)


def device_grid(fits: Mapping[str, bool], n_devices: int, max_shown: int = 64,
                title: str = "Which devices run out of memory (simulated)") -> go.Figure:
    """One row per configuration, one cell per device: green fits, red out of memory."""
    shown = min(n_devices, max_shown)
    names = list(fits)
    z = [[1 if fits[n] else 0] * shown for n in names]
    text = [["fits" if fits[n] else "out of memory"] * shown for n in names]
    fig = go.Figure(go.Heatmap(z=z, x=list(range(shown)), y=names, text=text, zmin=0, zmax=1,
                               colorscale=[[0, "#E45756"], [1, "#54A24B"]], showscale=False,
                               xgap=2, ygap=2, hovertemplate="device %{x}: %{text}<extra>%{y}"
                                                             "</extra>"))
    more = f" (first {shown} of {n_devices} shown; all are alike)" if shown < n_devices else ""
    return finish(fig, title + more, xaxis_title="device (rank)",
                  height=120 + 40 * len(names))


def shard_layout(real: Sequence[int], row_bytes: int = 4, title: str | None = None
                 ) -> go.Figure:
    """How dim 0 is cut: real rows per rank (fsdp_shards.fsdp_shard_rows), padding to rank 0's."""
    rows = list(real)
    dim0, world_size, chunk = sum(rows), len(rows), max(rows, default=0)
    ranks = [f"rank {r}" for r in range(world_size)]
    fig = go.Figure()
    fig.add_bar(y=ranks, x=rows, orientation="h", name="rows of the parameter",
                marker_color=CATEGORY_COLORS["parameters"])
    fig.add_bar(y=ranks, x=[chunk - k for k in rows], orientation="h", name="padding",
                marker_color="#DDDDDD", marker_line_color="#999999", marker_line_width=1)
    fig.update_layout(barmode="stack", height=120 + 40 * world_size)
    fig.update_yaxes(autorange="reversed")
    default = (f"dim0={dim0} on {world_size} ranks: ceil({dim0}/{world_size}) = {chunk} rows "
               f"each, {chunk * world_size - dim0} of padding (simulated: FSDP2's rule)")
    return finish(fig, title or default, xaxis_title=f"rows ({row_bytes} B per row-element)")


def shard_bytes(measured: Sequence[MemoryBreakdown], predicted: Sequence[MemoryBreakdown],
                measured_padded: Sequence[MemoryBreakdown] | None = None,
                title: str = "Model-state bytes per rank: measured vs predicted") -> go.Figure:
    """Grouped bars per rank and category, measured (solid) next to predicted (hatched)."""
    fig = go.Figure()
    ranks = [f"rank {r}" for r in range(len(measured))]
    for cat in ("parameters", "gradients", "optimizer"):
        for label, rows, shape in (("measured", measured, ""), ("predicted", predicted, "/")):
            fig.add_bar(x=ranks, y=[getattr(b, cat) for b in rows], name=f"{cat} ({label})",
                        offsetgroup=label, legendgroup=cat, marker_color=color_for(cat),
                        marker_pattern_shape=shape,
                        hovertemplate=f"{cat} {label}: %{{y}} B<extra>%{{x}}</extra>")
    if measured_padded is not None:
        fig.add_scatter(x=ranks, y=[b.parameters + b.gradients + b.optimizer
                                    for b in measured_padded], mode="markers",
                        marker={"symbol": "line-ew-open", "size": 40, "color": "black"},
                        name="allocated, padding included (measured)")
    fig.update_layout(barmode="stack")
    return finish(fig, title, yaxis_title="bytes")


def traffic_bars(volumes: Mapping[str, float], model_bytes: int, unit: str = "GB",
                 title: str = "Communication per step (simulated)") -> go.Figure:
    """Bars of communication volume per step, labelled in multiples of the model size."""
    scale = BYTE_UNITS[unit]
    names = list(volumes)
    fig = go.Figure(go.Bar(
        x=names, y=[volumes[n] / scale for n in names], marker_color="#72B7B2",
        text=[f"{volumes[n] / model_bytes:.2f}x model" if model_bytes else "" for n in names],
        textposition="outside"))
    fig.update_layout(yaxis_range=[0, max(volumes.values(), default=1) / scale * 1.25 or 1])
    return finish(fig, title, yaxis_title=f"{unit} per step (volume)")
