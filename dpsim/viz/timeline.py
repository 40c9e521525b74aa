"""A Trace drawn as a timeline: one row per device and stream, one bar per event.

`timeline` is the one Gantt builder: any strategy's step, simulated or measured, several
traces overlaid (simulated over measured, prefetch on and off), lanes for concurrent events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from dpsim.sim import Event, Trace
from dpsim.viz.style import (
    TIME_UNITS,
    color_for,
    finish,
    human_bytes,
    with_source,
)

Traces = Trace | Sequence[Trace] | Mapping[str, Trace]


def timeline(traces: Traces, title: str = "Timeline", unit: str = "ms",
             devices: Sequence[int] | None = None, max_events: int = 5000, *,
             streams: Sequence[str] | None = None, lanes: bool = False,
             step_time: bool = False) -> go.Figure:
    """Horizontal bars per (name, device, stream); one bar per event, one colour per kind.

    A mapping names each trace's rows ("prefetch on", "measured"); otherwise rows are
    named by the trace's source, the first trace's rows on top (simulated over measured).
    `devices` keeps only those devices; rows name the device when more than one is kept.
    `streams` fixes each trace's rows to these streams, top to bottom, even when empty.
    `lanes` draws events that overlap in time (concurrent all-reduces) side by side in
    their row, outlined in white, simulated bars faded instead of hatched. `step_time`
    writes each trace's step time (its last event's end) under the title.
    """
    scale = TIME_UNITS[unit]
    fig = go.Figure()
    rows: list[str] = []
    shown: set[str] = set()
    notes: list[str] = []
    for name, tr in _named(traces):
        events = [ev for ev in tr.events[:max_events] if devices is None or ev.device in devices]
        kept = [d for d in tr.devices if devices is None or d in devices]
        drawn = [ev for ev in events if streams is None or ev.stream in streams]
        row_of = {id(ev): _row(name, ev.device, ev.stream, len(kept) > 1) for ev in drawn}
        fixed = [_row(name, d, s, len(kept) > 1) for d in kept for s in streams or ()]
        rows += [r for r in dict.fromkeys([*fixed, *row_of.values()]) if r not in rows]
        place = _places(drawn, row_of) if lanes else None
        groups: dict[str, list[Event]] = {}
        for ev in drawn:
            groups.setdefault(ev.kind, []).append(ev)
        for kind, evs in groups.items():
            fig.add_bar(showlegend=kind not in shown,
                        **_bar(kind, evs, row_of, f"{name} ({tr.source})", tr.source != "simulated",
                               unit, place))
            shown.add(kind)
        if events:
            notes.append(f"{name}: {max(e.end_s for e in events) * scale:.2f} {unit}")
    fig.update_layout(barmode="overlay",
                      height=(230 if step_time else 140) + (45 if lanes else 40) * len(rows))
    if lanes:
        fig.update_layout(bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(rows)))
    spans = [(e.start_s, e.end_s) for _, tr in _named(traces) for e in tr.events[:max_events]
             if devices is None or e.device in devices]
    if spans:  # plotly's autorange does not always count a bar's base: set the range
        lo, hi = min(s for s, _ in spans) * scale, max(e for _, e in spans) * scale
        pad = 0.02 * (hi - lo or 1.0)
        fig.update_xaxes(range=[lo - pad, hi + pad])
    title = with_source(title, [tr.source for _, tr in _named(traces)])
    if step_time:
        return finish(fig, f"{title}<br><sup>step time — {'; '.join(notes)}</sup>",
                      xaxis_title=f"time from the start of the step ({unit})")
    return finish(fig, title, xaxis_title=unit)


def _named(traces: Traces) -> list[tuple[str, Trace]]:
    """(row name, trace) pairs: a mapping's keys, else each trace's source."""
    if isinstance(traces, Trace):
        return [(traces.source, traces)]
    if isinstance(traces, Mapping):
        return list(traces.items())
    return [(tr.source, tr) for tr in traces]


def _row(name: str, device: int, stream: str, many: bool) -> str:
    """A row's label: the device is named when the trace shows more than one."""
    return f"{name} · dev {device} · {stream}" if many else f"{name} · {stream}"


def _bar(kind: str, evs: Sequence[Event], row_of: Mapping[int, str], extra: str,
         measured: bool, unit: str, place: Mapping[int, tuple[float, float]] | None
         ) -> dict[str, Any]:
    """Arguments of one horizontal bar trace: the events of one kind in one trace."""
    scale = TIME_UNITS[unit]
    bar: dict[str, Any] = {
        "x": [(e.end_s - e.start_s) * scale for e in evs],
        "base": [e.start_s * scale for e in evs], "y": [row_of[id(e)] for e in evs],
        "customdata": [[e.label, human_bytes(e.nbytes) if e.nbytes else ""] for e in evs],
        "orientation": "h", "name": kind, "legendgroup": kind, "marker_color": color_for(kind),
        "hovertemplate": f"{kind} %{{customdata[0]}} %{{customdata[1]}}<br>start "
                         f"%{{base:.3f}} {unit}, %{{x:.3f}} {unit}<extra>{extra}</extra>",
    }
    if place is None:
        bar["marker_pattern_shape"] = "" if measured else "/"
    else:
        bar.update(width=[place[id(e)][0] for e in evs], offset=[place[id(e)][1] for e in evs],
                   marker_line={"width": 0.5, "color": "white"}, opacity=1.0 if measured else 0.75)
    return bar


def _places(events: Sequence[Event], row_of: Mapping[int, str]) -> dict[int, tuple[float, float]]:
    """id(event) -> (width, offset) of its bar: events overlapping in time in one row are
    drawn side by side, each in its own lane (one lane, the full row, when none overlap)."""
    by_row: dict[str, list[Event]] = {}
    for ev in events:
        by_row.setdefault(row_of[id(ev)], []).append(ev)
    out: dict[int, tuple[float, float]] = {}
    for evs in by_row.values():
        ends: list[float] = []
        lanes: dict[int, int] = {}
        for e in sorted(evs, key=lambda e: (e.start_s, e.end_s)):
            lane = next((i for i, end in enumerate(ends) if end <= e.start_s + 1e-12), len(ends))
            if lane == len(ends):
                ends.append(e.end_s)
            else:
                ends[lane] = e.end_s
            lanes[id(e)] = lane
        width = 0.8 / (max(lanes.values(), default=0) + 1)
        out.update({i: (width, -0.4 + lane * width) for i, lane in lanes.items()})
    return out
