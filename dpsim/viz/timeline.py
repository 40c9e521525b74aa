"""A Trace drawn as a timeline: one row per device and stream, one bar per event."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dpsim.trace import Trace
from dpsim.viz.style import color_for, finish


def timeline(traces: Trace | Sequence[Trace] | Mapping[str, Trace], title: str = "Timeline",
             unit: str = "ms", devices: Sequence[int] | None = None,
             max_events: int = 5000) -> go.Figure:
    """Horizontal bars per (name, device, stream); one bar per event, one colour per kind.

    A mapping names each trace's rows ("prefetch on", "measured"); otherwise rows are
    named by the trace's source. `devices` keeps only those devices' rows.
    """
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    if isinstance(traces, Trace):
        named = [(traces.source, traces)]
    elif isinstance(traces, Mapping):
        named = list(traces.items())
    else:
        named = [(tr.source, tr) for tr in traces]
    fig = go.Figure()
    rows: list[str] = []
    shown: set[str] = set()
    for name, tr in named:
        groups: dict[str, list[tuple[str, float, float, str]]] = {}
        many = len(tr.devices) > 1
        for ev in tr.events[:max_events]:
            if devices is not None and ev.device not in devices:
                continue
            row = f"{name} · dev {ev.device} · {ev.stream}" if many else f"{name} · {ev.stream}"
            if row not in rows:
                rows.append(row)
            groups.setdefault(ev.kind, []).append((row, ev.start_s, ev.end_s, ev.label))
        for kind, evs in groups.items():
            fig.add_bar(
                x=[(e - s) * scale for _, s, e, _ in evs], base=[s * scale for _, s, _, _ in evs],
                y=[r for r, _, _, _ in evs], customdata=[lab for _, _, _, lab in evs],
                orientation="h", name=kind, legendgroup=kind, showlegend=kind not in shown,
                marker_color=color_for(kind),
                marker_pattern_shape="" if tr.source == "measured" else "/",
                hovertemplate=f"{kind} %{{customdata}}<br>start %{{base:.3f}} {unit}, "
                              f"%{{x:.3f}} {unit}<extra>{name} ({tr.source})</extra>",
            )
            shown.add(kind)
    fig.update_layout(barmode="overlay", height=140 + 40 * len(rows))
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)))
    return finish(fig, title, xaxis_title=unit)


def memory_over_time(trace: Trace, device: int = 0, title: str = "Memory over the step",
                     unit: str = "MiB") -> go.Figure:
    """Stacked step lines of bytes per category on one device."""
    scale = {"MiB": 1024**2, "GiB": 1024**3}[unit]
    timeline_points = trace.memory_timeline(device)
    cats = sorted({c for _, d in timeline_points for c in d})
    fig = go.Figure()
    times = [t * 1e3 for t, _ in timeline_points]
    for cat in cats:
        fig.add_scatter(x=times, y=[d.get(cat, 0) / scale for _, d in timeline_points],
                        name=cat, stackgroup="one", line={"shape": "hv", "color": color_for(cat)})
    return finish(fig, f"{title} ({trace.source}, device {device})", xaxis_title="ms",
                  yaxis_title=unit)
