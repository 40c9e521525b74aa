"""The ring all-reduce, animated: one frame per step of `collectives.ring.ring_all_reduce_steps`.

Left: the ranks on a ring, an arrow for every chunk sent in the step. Right: every rank's
array (a row per rank, a cell per element) with its current numbers; the colour says
how many ranks' data a cell already sums (1 = only its own, N = the full sum). A Play
button and a slider step through the start, the N-1 reduce-scatter steps and the N-1
all-gather steps; in the last frame every row is the element-wise sum.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dpsim.sim import RingStep
from dpsim.viz.style import KIND_COLORS, finish

MAX_TEXT_ELEMENTS = 24  # above this many elements per rank, cells show colour only


def _positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank r at angle 90 - 360 r / n degrees (rank 0 on top, clockwise)."""
    angles = np.pi / 2 - 2 * np.pi * np.arange(n) / max(n, 1)
    return np.cos(angles), np.sin(angles)


def _fmt(value: Any) -> str:
    number = float(value)
    if number == int(number) and abs(number) < 1e6:
        return str(int(number))
    return f"{number:.3g}"


def _arrow_traces(step: RingStep, xs: np.ndarray, ys: np.ndarray) -> list[go.Scatter]:
    """One line with an arrow head per message, and a label 'chunk c' at its middle."""
    color = KIND_COLORS["reduce_scatter" if step.phase == "reduce_scatter" else "all_gather"]
    lx: list[float | None] = []
    ly: list[float | None] = []
    tx, ty, labels = [], [], []
    for s in step.sends:
        x0, y0, x1, y1 = xs[s.src], ys[s.src], xs[s.dst], ys[s.dst]
        # shorten so the arrow stops at the node's edge; bow outwards a little
        a0, a1 = 0.18, 0.82
        lx += [x0 + a0 * (x1 - x0), x0 + a1 * (x1 - x0), None]
        ly += [y0 + a0 * (y1 - y0), y0 + a1 * (y1 - y0), None]
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        norm = math.hypot(mx, my) or 1.0
        tx.append(mx + 0.14 * mx / norm)
        ty.append(my + 0.14 * my / norm)
        labels.append(f"chunk {s.chunk}")
    symbols = ["line-ew", "arrow", "line-ew"] * len(step.sends)
    lines = go.Scatter(x=lx or [None], y=ly or [None], mode="lines+markers",
                       line={"color": color, "width": 3},
                       marker={"symbol": symbols or ["circle"], "size": 14, "color": color,
                               "angleref": "previous"},
                       hoverinfo="skip", showlegend=False, xaxis="x", yaxis="y")
    text = go.Scatter(x=tx or [None], y=ty or [None], mode="text", text=labels or [""],
                      textfont={"size": 11, "color": color}, hoverinfo="skip",
                      showlegend=False, xaxis="x", yaxis="y")
    return [lines, text]


def _grid_trace(step: RingStep) -> go.Heatmap:
    n = len(step.buffers)
    length = step.buffers[0].shape[0]
    counts = np.zeros((n, max(length, 1)))
    for rank in range(n):
        for chunk, (a, b) in enumerate(step.bounds):
            counts[rank, a:b] = len(step.contributors[rank][chunk])
    values = [[_fmt(v) for v in buf] for buf in step.buffers]
    hover = [[f"rank {r}, element {i}: {values[r][i]}<br>sum of ranks "
              f"{list(step.contributors[r][_chunk_of(i, step.bounds)])}"
              for i in range(length)] for r in range(n)]
    show_text = length <= MAX_TEXT_ELEMENTS
    return go.Heatmap(
        z=counts if length else np.full((n, 1), np.nan),
        x=list(range(max(length, 1))), y=list(range(n)),
        text=values if length else None, texttemplate="%{text}" if show_text else None,
        hovertext=hover if length else None, hoverinfo="text",
        zmin=1, zmax=max(n, 2), colorscale="Blues",
        colorbar={"title": {"text": "ranks<br>summed"}, "len": 0.8},
        xgap=2, ygap=2, xaxis="x2", yaxis="y2",
    )


def _chunk_of(index: int, bounds: tuple[tuple[int, int], ...]) -> int:
    for chunk, (a, b) in enumerate(bounds):
        if a <= index < b:
            return chunk
    return 0


def _sent_outline(step: RingStep) -> go.Scatter:
    """Rectangles around the chunk each rank sends in this step (on its own row)."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for s in step.sends:
        if s.stop <= s.start:
            continue
        x0, x1 = s.start - 0.5, s.stop - 0.5
        y = s.src  # row of the sender (the axis runs rank 0 at the top)
        xs += [x0, x1, x1, x0, x0, None]
        ys += [y - 0.5, y - 0.5, y + 0.5, y + 0.5, y - 0.5, None]
    return go.Scatter(x=xs or [None], y=ys or [None], mode="lines",
                      line={"color": "#E45756", "width": 3}, hoverinfo="skip",
                      name="chunk being sent", showlegend=False, xaxis="x2", yaxis="y2")


def _frame_data(step: RingStep, xs: np.ndarray, ys: np.ndarray) -> list[Any]:
    return [*_arrow_traces(step, xs, ys), _grid_trace(step), _sent_outline(step)]


def _caption(step: RingStep) -> str:
    n = len(step.buffers)
    if step.phase == "start":
        return f"start: {n} ranks, each array cut into {n} chunks (dotted lines)"
    verb = "adds it to its own copy" if step.phase == "reduce_scatter" else "overwrites its copy"
    return (f"{step.label}: each rank sends the chunk in the red box to its right neighbour, "
            f"which {verb}")


def ring_animation(steps: list[RingStep],
                   title: str = "Ring all-reduce, step by step (simulated)"
                   ) -> go.Figure:
    """Animated figure of a ring all-reduce: a frame per step, Play button and slider."""
    if not steps:
        raise ValueError("steps=[] is empty; give the list ring_all_reduce_steps(arrays) returns")
    n = len(steps[0].buffers)
    xs, ys = _positions(n)
    fig = make_subplots(rows=1, cols=2, column_widths=[0.35, 0.65],
                        subplot_titles=("ranks on a ring", "each rank's array"),
                        horizontal_spacing=0.08)
    nodes = go.Scatter(x=xs, y=ys, mode="markers+text", text=[str(r) for r in range(n)],
                       marker={"size": 30 if n <= 16 else 14, "color": "#4C78A8"},
                       textfont={"color": "white", "size": 12}, hoverinfo="text",
                       hovertext=[f"rank {r}" for r in range(n)], showlegend=False)
    fig.add_trace(nodes, row=1, col=1)
    first = _frame_data(steps[0], xs, ys)
    for i, trace in enumerate(first):
        fig.add_trace(trace, row=1, col=1 if i < 2 else 2)
    n_static = 1
    traces = list(range(n_static, n_static + len(first)))
    frames = [go.Frame(data=_frame_data(s, xs, ys), traces=traces, name=str(i),
                       layout={"title": {"text": f"{title}<br><sup>{_caption(s)}</sup>"}})
              for i, s in enumerate(steps)]
    fig.frames = frames
    slider_steps = [{"label": "start" if s.phase == "start" else
                     f"{'RS' if s.phase == 'reduce_scatter' else 'AG'} {s.step}",
                     "method": "animate",
                     "args": [[str(i)], {"mode": "immediate", "frame": {"duration": 0,
                                                                         "redraw": True},
                                         "transition": {"duration": 0}}]}
                    for i, s in enumerate(steps)]
    play = {"label": "Play", "method": "animate",
            "args": [None, {"frame": {"duration": 900, "redraw": True},
                            "transition": {"duration": 0}, "fromcurrent": True}]}
    pause = {"label": "Pause", "method": "animate",
             "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]}
    finish(fig, f"{title}<br><sup>{_caption(steps[0])}</sup>", height=460 + 12 * n,
           updatemenus=[{"type": "buttons", "buttons": [play, pause], "x": 0.0, "y": -0.1,
                         "xanchor": "left", "yanchor": "top", "direction": "left",
                         "pad": {"t": 40}}],
           sliders=[{"steps": slider_steps, "active": 0, "x": 0.16, "y": -0.1, "len": 0.84,
                     "xanchor": "left", "yanchor": "top", "pad": {"t": 30},
                     "currentvalue": {"prefix": "step: "}}])
    fig.update_layout(margin={"l": 40, "r": 20, "t": 110, "b": 110})
    fig.update_xaxes(visible=False, range=[-1.45, 1.45], row=1, col=1)
    fig.update_yaxes(visible=False, range=[-1.45, 1.45], scaleanchor="x", row=1, col=1)
    fig.update_yaxes(autorange="reversed", tickvals=list(range(n)),
                     ticktext=[f"rank {r}" for r in range(n)], row=1, col=2)
    fig.update_xaxes(title_text="element", row=1, col=2)
    for b_start, _ in steps[0].bounds[1:]:  # chunk borders
        fig.add_vline(x=b_start - 0.5, line={"color": "#333", "width": 1, "dash": "dot"},
                      row=1, col=2)
    return fig
