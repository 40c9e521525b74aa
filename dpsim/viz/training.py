"""Training curves and predicted-vs-measured scatter plots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dpsim.viz.style import finish


def loss_curves(curves: Mapping[str, Sequence[float]], title: str = "Training loss (measured)"
                ) -> go.Figure:
    """One line per named run (e.g. per rank)."""
    fig = go.Figure()
    for name, losses in curves.items():
        fig.add_scatter(x=list(range(1, len(losses) + 1)), y=list(losses), name=name,
                        mode="lines")
    return finish(fig, title, xaxis_title="step", yaxis_title="loss")


def predicted_vs_measured(x: Sequence[float], predicted: Sequence[float],
                          measured: Sequence[float], *, x_title: str, y_title: str,
                          title: str, log_x: bool = False) -> go.Figure:
    """Simulated values as a dashed line, measured ones as markers, over the same x."""
    fig = go.Figure()
    fig.add_scatter(x=list(x), y=list(predicted), name="simulated", mode="lines+markers",
                    line={"dash": "dash"})
    fig.add_scatter(x=list(x), y=list(measured), name="measured", mode="markers",
                    marker={"size": 10, "symbol": "x", "color": "black"})
    if log_x:
        fig.update_xaxes(type="log")
    return finish(fig, title, xaxis_title=x_title, yaxis_title=y_title)
