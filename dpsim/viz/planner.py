"""Figures for choosing a strategy: step split, memory per device, scaling curves.

The dashboard redraws on every slider move, so these builders pass plain dicts to one
`go.Figure(...)` call and style the layout by hand: plotly's subplot helper and template
lookup cost more than the whole simulation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from dpsim.sim import Crossover, PlanResult, efficiencies
from dpsim.viz.style import STEP_SPLIT_COLORS
from dpsim.viz.table import Column, table_figure

SPLIT_COLORS = STEP_SPLIT_COLORS
PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#B279A2")
FAR_BELOW = 0.15  # peaks under this share of the device's memory: zoom in, name the size
MAX_BARS = 64  # beyond this many identical devices, they are drawn as one bar
DEVICE_TICKS = {"tickvals": [4**k for k in range(6)]}  # 1, 4, 16, ... 1024 devices
_GRID = {"gridcolor": "#EBEBEB", "zerolinecolor": "#EBEBEB", "linecolor": "#BBBBBB"}


def _layout(title: str, domains: Sequence[tuple[float, float]], titles: Sequence[str],
            height: int) -> dict[str, Any]:
    """A white layout with one x/y axis pair per domain and a title over each."""
    layout: dict[str, Any] = {
        "title": {"text": title}, "height": height, "plot_bgcolor": "white",
        "paper_bgcolor": "white", "margin": {"l": 60, "r": 20, "t": 80, "b": 50},
        "legend": {"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom"},
        "barmode": "stack", "annotations": [],
    }
    for i, (dom, sub) in enumerate(zip(domains, titles, strict=True), start=1):
        sfx = "" if i == 1 else str(i)
        layout[f"xaxis{sfx}"] = {"domain": list(dom), "anchor": f"y{sfx}", **_GRID}
        layout[f"yaxis{sfx}"] = {"anchor": f"x{sfx}", **_GRID}
        layout["annotations"].append({"text": sub, "x": sum(dom) / 2, "y": 1.02,
                                      "xref": "paper", "yref": "paper", "showarrow": False,
                                      "xanchor": "center", "yanchor": "bottom"})
    return layout


def _axes(i: int) -> dict[str, str]:
    return {"xaxis": f"x{'' if i == 1 else i}", "yaxis": f"y{'' if i == 1 else i}"}


def plan_figure(p: PlanResult, curve: Sequence[PlanResult] | None = None,
                mode: str = "strong", where: str = "") -> go.Figure:
    """Step split, memory per device (out-of-memory in red) and, if given, the scaling curve;
    `where` (e.g. the cluster as resized) is written under the title."""
    domains = [(0.0, 0.28), (0.36, 0.64), (0.72, 1.0)] if curve else [(0.0, 0.45),
                                                                        (0.55, 1.0)]
    titles = ["step time (ms)", "peak memory per device",
              f"{mode} scaling (vs first point)"]
    data: list[dict[str, Any]] = []
    split = {"compute": p.compute_s, "hidden comm": p.hidden_comm_s,
             "exposed comm": p.exposed_comm_s, "host / GIL": p.other_s}
    for name, seconds in split.items():  # hidden comm runs beside compute: its own column
        col = "comm (overlapped)" if name == "hidden comm" else "step"
        data.append({"type": "bar", "x": [col], "y": [seconds * 1e3], "name": name,
                     "marker": {"color": SPLIT_COLORS[name]}, **_axes(1),
                     "hovertemplate": f"{name}: %{{y:.3g}} ms<extra></extra>"})
    title = (f"{p.label} on {p.n_devices} device(s), global batch {p.global_batch}: "
             f"{p.samples_per_s:,.0f} samples/s (simulated)")
    layout = _layout(title + (f"<br><sup>{where}</sup>" if where else ""), domains,
                     titles[:len(domains)], 420 if where else 400)
    if where:  # room for the subtitle above the panel titles
        layout["margin"]["t"] = 110
    data += _memory(p, layout)
    if curve:
        effs = efficiencies(curve, mode)
        data.append({"type": "scatter", "x": [c.n_devices for c in curve], "y": effs,
                     "mode": "lines+markers", "name": "efficiency",
                     "line": {"color": PALETTE[0]}, **_axes(3)})
        here = [e for c, e in zip(curve, effs, strict=True) if c.n_devices == p.n_devices]
        data.append({"type": "scatter", "x": [p.n_devices], "y": here[:1], "mode": "markers",
                     "marker": {"size": 12, "color": "#E45756"}, "name": f"N = {p.n_devices}",
                     **_axes(3)})
        layout["xaxis3"].update({"type": "log", "title": {"text": "devices"}, **DEVICE_TICKS})
        layout["yaxis3"].update({"range": [0, 1.05]})
    return go.Figure(data=data, layout=layout)


def _memory(p: PlanResult, layout: dict[str, Any]) -> list[dict[str, Any]]:
    """Bars of GiB per device and a dashed line at the device's memory (axes 2)."""
    gib = [b / 1024**3 for b in p.peak_bytes]
    if len(gib) > MAX_BARS and len(set(p.peak_bytes)) == 1:
        x, gib = [f"each of {len(gib)}"], gib[:1]
    else:
        x = [f"dev {d}" for d in range(len(gib))]
    cap = p.memory_bytes / 1024**3
    n_oom = len(p.oom_devices)
    layout["yaxis2"]["title"] = {"text": "GiB" + (f": {n_oom} OUT OF MEMORY" if n_oom else "")}
    bars: dict[str, Any] = {
        "type": "bar", "x": x, "y": gib, "name": "peak (GiB)", "showlegend": False,
        "marker": {"color": ["#E45756" if g > cap else "#54A24B" for g in gib]}, **_axes(2),
        "hovertemplate": "%{x}: %{y:.3g} GiB<extra></extra>"}
    if 0 < max(gib, default=0.0) < FAR_BELOW * cap:  # the memory line would flatten the bars
        layout["yaxis2"]["range"] = [0, max(gib) * 1.25]
        layout["annotations"][1]["text"] += f" (of {cap:.0f} GiB: far from full)"
        return [bars]
    return [bars, {"type": "scatter", "x": [x[0], x[-1]], "y": [cap, cap], "mode": "lines",
                   "line": {"color": "red", "dash": "dash", "width": 1.5},
                   "name": f"device memory ({cap:.0f} GiB)", "hoverinfo": "name", **_axes(2)}]


def scaling_figure(curves: Mapping[str, Sequence[PlanResult]], mode: str = "strong",
                   crossovers: Sequence[Crossover] = ()) -> go.Figure:
    """Efficiency (left) and exposed-comm share of the step (right) against device count,
    with the formula's crossover (dashed) and the simulation's (dotted)."""
    data: list[dict[str, Any]] = []
    for i, (label, curve) in enumerate(curves.items()):
        color = PALETTE[i % len(PALETTE)]
        xs = [c.n_devices for c in curve]
        data.append({"type": "scatter", "x": xs, "y": efficiencies(curve, mode), "name": label,
                     "mode": "lines+markers", "line": {"color": color}, **_axes(1)})
        data.append({"type": "scatter", "x": xs, "y": [c.exposed_comm_s / c.step_s
                                                       for c in curve],
                     "name": f"{label} exposed", "mode": "lines+markers", "showlegend": False,
                     "line": {"color": color, "dash": "dot"}, **_axes(2)})
    top = max(c.n_devices for cv in curves.values() for c in cv)
    # the exposed share's axis zooms to its data (at least 0-10 %), so a few % stay visible
    share_top = min(1.05, max(0.1, 1.15 * max(c.exposed_comm_s / c.step_s
                                              for cv in curves.values() for c in cv)))
    layout = _layout(f"{mode.capitalize()} scaling from 1 to {top} devices (simulated)",
                     [(0.0, 0.45), (0.55, 1.0)],
                     ["scaling efficiency", "exposed communication / step"], 440)
    for i, cr in enumerate(crossovers):
        color = PALETTE[i % len(PALETTE)]
        marks = [(cr.formula_devices, "dash", "formula")]
        if cr.simulated_devices:
            marks.append((float(cr.simulated_devices), "dot", "simulated"))
        for ax in (1, 2):
            for x, dash, what in marks:
                y_top = 1.05 if ax == 1 else share_top
                data.append({"type": "scatter", "x": [x, x], "y": [0, y_top], "mode": "lines",
                             "showlegend": False, "line": {"color": color, "dash": dash,
                                                           "width": 1},
                             "name": f"{cr.label} crossover ({what})", **_axes(ax)})
        layout["annotations"].append({
            "x": 0.01, "y": 0.03 + 0.07 * i, "xref": "paper", "yref": "paper",
            "showarrow": False, "xanchor": "left", "font": {"color": color, "size": 11},
            "text": f"{cr.label}: formula N* = {cr.formula_devices:.0f} (dashed),"
                    f" simulated {cr.simulated_devices} (dotted)"})
    for name in ("xaxis", "xaxis2"):
        layout[name].update({"type": "log", "title": {"text": "devices"}, **DEVICE_TICKS})
    layout["yaxis"]["range"] = [0, 1.05]
    layout["yaxis2"]["range"] = [0, share_top]
    return go.Figure(data=data, layout=layout)


SUMMARY_COLUMNS = (
    Column("strategy", "strategy"), Column("devices", "devices", "d"),
    Column("replicated", "replicated on every device"), Column("sharded", "split across devices"),
    Column("traffic_GB_per_device", "traffic per device and step (GB)", "sig"),
    Column("memory_GiB_per_device", "peak memory per device (GiB)", "sig"),
    Column("fits", "fits?"), Column("step_ms", "step (ms)", "sig"),
    Column("samples_per_s", "samples per second", ",.0f"),
    Column("exposed_comm_ms", "exposed comm (ms)", "sig"), Column("use_when", "use when"),
)


def summary_figure(rows: Sequence[Mapping[str, object]], title: str) -> go.Figure:
    """The strategies side by side (rows from planner.summary_table) as a table; rows whose
    states do not fit are shaded red."""
    return table_figure(rows, SUMMARY_COLUMNS, title, highlight=lambda r: r.get("fits") is False)
