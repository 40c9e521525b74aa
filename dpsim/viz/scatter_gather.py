"""DataParallel's step, phase by phase, drawn from a Trace (simulated or measured).

`phase_steps(trace)` reads, for every phase of the step (scatter, replicate, forward,
gather, loss, backward, reduce, optimizer), what each device did, the bytes that moved
and what each device held at the end of the phase. `scatter_gather(trace)` draws it:
devices in a row with arrows for the data that flows (device 0 -> others for scatter,
replicate and the output gradients; others -> device 0 for gather and reduce), and below
them the memory each device holds, with a slider (or Play) to step through the phases.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.sim import Trace
from dpsim.viz.memory_per_device import bytes_at, categories, category_color
from dpsim.viz.style import BYTE_UNITS, finish, human_bytes

PHASE_ORDER = ("scatter", "replicate", "forward", "gather", "loss", "backward", "reduce",
               "optimizer")
OUTWARD = ("scatter", "replicate", "grad_scatter")  # device 0 -> the others
INWARD = ("gather", "reduce")  # the others -> device 0
CAPTIONS = {
    "scatter": "the batch is cut into chunks (torch.chunk) and copied to the devices",
    "replicate": "the module is copied from device 0 to every device in use",
    "forward": "one thread per device runs forward on its replica",
    "gather": "the outputs are copied to device 0 and concatenated",
    "loss": "the loss of the whole batch is computed on device 0",
    "backward": "the output gradient goes back to each device; each runs its backward",
    "reduce": "the replicas' gradients are summed onto device 0",
    "optimizer": "device 0 updates the parameters (copied again at the next step)",
}


@dataclass
class PhaseStep:
    """One phase of the step as the trace recorded it."""

    name: str
    start_s: float
    end_s: float
    busy_s: dict[int, float] = field(default_factory=dict)  # device -> seconds in this phase
    moved: dict[int, int] = field(default_factory=dict)  # device -> bytes sent or received
    arrows: list[tuple[int, int, int]] = field(default_factory=list)  # (src, dst, nbytes)
    memory: dict[int, dict[str, int]] = field(default_factory=dict)  # at the phase's end


def phase_steps(trace: Trace) -> list[PhaseStep]:
    """The phases present in `trace`, in step order."""
    devices = trace.devices
    steps = []
    for name in PHASE_ORDER:
        kinds = (name, "grad_scatter") if name == "backward" else (name,)
        events = [e for e in trace.events if e.kind in kinds]
        if not events:
            continue
        step = PhaseStep(name, min(e.start_s for e in events), max(e.end_s for e in events))
        for e in events:
            step.busy_s[e.device] = step.busy_s.get(e.device, 0.0) + e.duration_s
            step.moved[e.device] = step.moved.get(e.device, 0) + e.nbytes
            if e.nbytes and e.device != 0 and e.kind in OUTWARD:
                step.arrows.append((0, e.device, e.nbytes))
            if e.nbytes and e.device != 0 and e.kind in INWARD:
                step.arrows.append((e.device, 0, e.nbytes))
        step.memory = bytes_at(trace, step.end_s, devices)
        steps.append(step)
    return steps


def _positions(devices: list[int]) -> dict[int, tuple[float, float]]:
    """Device 0 on the left (the hub), the others in a column on the right."""
    others = [d for d in devices if d != 0]
    mid = (len(others) - 1) / 2 if others else 0.0
    pos = {0: (0.0, mid)}
    for i, d in enumerate(others):
        pos[d] = (1.0, float(len(others) - 1 - i))
    return pos


def _annotations(step: PhaseStep, devices: list[int]) -> list[dict[str, object]]:
    pos = _positions(devices)
    notes: list[dict[str, object]] = []
    for src, dst, nbytes in step.arrows:
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        notes.append({"x": x1, "y": y1, "ax": x0, "ay": y0, "xref": "x", "yref": "y",
                      "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 3,
                      "arrowwidth": 2, "arrowcolor": "#E45756", "text": "",
                      "standoff": 16, "startstandoff": 16})
        notes.append({"x": x0 + 0.55 * (x1 - x0), "y": y0 + 0.55 * (y1 - y0),
                      "xref": "x", "yref": "y", "showarrow": False, "yshift": 9,
                      "text": human_bytes(nbytes), "bgcolor": "rgba(255,255,255,0.8)",
                      "font": {"size": 10, "color": "#E45756"}})
    caption = {"x": 0.0, "y": 1.0, "xref": "paper", "yref": "paper", "showarrow": False,
               "xanchor": "left", "yanchor": "bottom", "align": "left",
               "text": f"<b>{step.name}</b> ({_seconds(step.end_s - step.start_s)}): "
                       f"{CAPTIONS.get(step.name, '')}"}
    # the caption comes first: plotly merges frame annotations by position
    return [caption, *notes]


def _seconds(t: float) -> str:
    if t >= 1.0:
        return f"{t:.3g} s"
    return f"{t * 1e3:.3g} ms" if t >= 1e-3 else f"{t * 1e6:.3g} µs"


def _device_text(step: PhaseStep, devices: list[int]) -> list[str]:
    out = []
    for d in devices:
        busy = step.busy_s.get(d)
        line = f"<b>device {d}</b> " + (_seconds(busy) if busy else "idle")
        if step.moved.get(d):
            line += f", {human_bytes(step.moved[d])}"
        out.append(line)
    return out


def scatter_gather(trace: Trace, unit: str = "MiB",
                   title: str = "DataParallel, phase by phase") -> go.Figure:
    """Devices, data flow and memory per device for every phase, with a phase slider."""
    steps = phase_steps(trace)
    if not steps:
        raise ValueError("the trace has no DataParallel phases (scatter, forward, ...); "
                         "give a trace from strategies.dp.simulate or runtime.dp_cpu")
    devices = trace.devices
    cats = categories(trace)
    scale = BYTE_UNITS[unit]
    fig = make_subplots(rows=2, cols=1, row_heights=[0.55, 0.45], vertical_spacing=0.1)

    pos = _positions(devices)
    xs, ys = [pos[d][0] for d in devices], [pos[d][1] for d in devices]

    def traces_for(step: PhaseStep) -> list[go.BaseTraceType]:
        ends = {d for a in step.arrows for d in a[:2]}
        active = [step.busy_s.get(d, 0.0) > 0 or d in ends for d in devices]
        data: list[go.BaseTraceType] = [go.Scatter(
            x=xs, y=ys, mode="markers+text", text=_device_text(step, devices),
            textposition=["middle left" if d == 0 else "middle right" for d in devices],
            marker={"symbol": "square", "size": 26, "line": {"width": 2, "color": "#333"},
                    "color": ["#F58518" if a else "#DDDDDD" for a in active]},
            showlegend=False, hoverinfo="skip")]
        for cat in cats:
            data.append(go.Bar(x=[f"device {d}" for d in devices],
                               y=[step.memory[d].get(cat, 0) / scale for d in devices],
                               name=cat, marker_color=category_color(cat), legendgroup=cat))
        return data

    n_notes = max(len(_annotations(s, devices)) for s in steps)

    def notes_for(step: PhaseStep) -> list[dict[str, object]]:
        # every frame gets as many annotations, so no arrow of an earlier phase lingers
        notes = _annotations(step, devices)
        return notes + [{"visible": False}] * (n_notes - len(notes))

    for tr in traces_for(steps[0]):
        fig.add_trace(tr, row=1 if isinstance(tr, go.Scatter) else 2, col=1)
    fig.frames = [go.Frame(name=s.name, data=traces_for(s),
                           layout=go.Layout(annotations=notes_for(s)))
                  for s in steps]
    n_right = max(len(devices) - 1, 1)
    fig.update_layout(
        annotations=notes_for(steps[0]), barmode="stack",
        height=460 + 28 * n_right,
        sliders=[{"active": 0, "currentvalue": {"prefix": "phase: "}, "pad": {"t": 30},
                  "x": 0.08, "len": 0.92,
                  "steps": [{"label": s.name, "method": "animate",
                             "args": [[s.name], {"mode": "immediate", "frame": {
                                 "duration": 0, "redraw": True}, "transition": {
                                 "duration": 0}}]} for s in steps]}],
        updatemenus=[{"type": "buttons", "showactive": False, "x": 0.0, "y": 0.0,
                      "xanchor": "left", "yanchor": "top", "pad": {"t": 55},
                      "buttons": [{"label": "Play", "method": "animate",
                                   "args": [None, {"frame": {"duration": 900,
                                                             "redraw": True},
                                                   "fromcurrent": True}]}]}])
    fig.update_xaxes(range=[-0.9, 1.9], visible=False, row=1, col=1)
    fig.update_yaxes(range=[-0.7, n_right - 0.3], visible=False, row=1, col=1)
    fig.update_yaxes(title_text=f"{unit} held", row=2, col=1)
    finish(fig, f"{title} ({trace.source})")
    fig.update_layout(margin={"t": 90}, legend={"orientation": "v", "yref": "paper", "x": 1.02,
                                                  "y": 0.45})
    return fig

