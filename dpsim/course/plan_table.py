"""The start notebook's table: what each chapter runs for real here, what it simulates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from dpsim.viz.table import Column, table_figure

PLAN_COLUMNS = (
    Column("notebook", "notebook"),
    Column("real here", "measured here (real PyTorch on this machine)"),
    Column("simulated", "simulated (dpsim's model)"),
)


def plan_figure(rows: Sequence[Mapping[str, object]]) -> go.Figure:
    """`doctor.report()["plan"]` (or `chapters.plan`) as a readable table."""
    return table_figure(list(rows), list(PLAN_COLUMNS),
                        "Chapter by chapter: measured here, or simulated")
