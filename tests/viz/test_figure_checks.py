"""The figure checks (tests.support.figure_checks) catch broken figures, and every dashboard passes
them.

Notebook figures are checked as they run under nbval (the repository's conftest.py) and,
as drawn by plotly.js, in the browser test; here the checks are shown failing on
deliberately broken figures, and the dashboards' figures are checked at several settings
(a learner moves every control).
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import pytest

from dpsim.viz.table import Column, table_figure, text_table
from tests.support.figure_checks import axis_problem, figure_problems, source_problem


def _bars(**layout: Any) -> go.Figure:
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1.0, 2.0], name="bytes"))
    fig.update_layout(**{"title": "Bytes (simulated)", **layout})
    return fig


def test_a_good_figure_has_no_problem() -> None:
    assert figure_problems(_bars()) == []


def test_an_axis_that_leaves_the_data_a_sliver_is_caught() -> None:
    problems = figure_problems(_bars(yaxis_range=[0, 100]))
    assert problems == ["yaxis: the data fills 2 % of the axis (at least 10 % should)"]


def test_bars_that_run_off_the_plot_are_caught() -> None:
    fig = go.Figure(go.Bar(x=[3.0, 4.0], base=[0.0, 3.0], y=["a", "b"], orientation="h"))
    fig.update_layout(title="Step (measured)", xaxis_range=[-0.3, 0.15])
    assert any("outside the axis range" in p for p in figure_problems(fig))


def test_an_annotation_in_data_units_on_a_log_axis_is_caught() -> None:
    """The bug of chapter 1's fit chart: plotly reads a log axis's annotation in log10
    units, so an annotation at y=80 stretched the axis to 10^80."""
    fig = _bars(yaxis_type="log")
    fig.add_annotation(x=1, y=80, xref="paper", yref="y", text="80 GiB", showarrow=False)
    assert any("decades" in p for p in figure_problems(fig))
    fine = _bars(yaxis_type="log")
    fine.add_annotation(x=1, y=1.9, xref="paper", yref="y", text="80 GiB", showarrow=False)
    assert figure_problems(fine) == []


def test_an_empty_trace_and_an_empty_panel_are_caught() -> None:
    fig = go.Figure([go.Bar(x=["a"], y=[1.0], name="full"),
                     go.Bar(x=[], y=[], name="nothing", xaxis="x2", yaxis="y2")])
    fig.update_layout(title="Two panels (simulated)", xaxis2={"domain": [0.6, 1]},
                      xaxis={"domain": [0, 0.4]})
    problems = figure_problems(fig)
    assert "trace 'nothing' has no data" in problems
    assert "the panel on axes x2/y2 is empty" in problems
    assert figure_problems(fig, may_be_empty=["nothing"]) == ["the panel on axes x2/y2 is empty"]


def test_a_reference_line_does_not_count_as_data() -> None:
    """The bars of a tiny model under a device's 40 GiB line were invisible (chapter 7)."""
    fig = go.Figure([go.Bar(x=["dev 0", "dev 1"], y=[0.09, 0.09], name="peak"),
                     go.Scatter(x=["dev 0", "dev 1"], y=[40, 40], mode="lines", name="memory")])
    fig.update_layout(title="Memory (simulated)")
    assert figure_problems(fig) == ["yaxis: the data fills 0 % of the axis (at least 10 % "
                                    "should)"]


def test_a_cut_off_table_header_is_caught() -> None:
    fig = go.Figure(go.Table(header={"values": ["strategy", "traffic_GB_per_device"]},
                             cells={"values": [["DDP"], [1.0]]}, columnwidth=[10, 1]))
    fig.update_layout(title="Strategies (simulated)")
    assert any("traffic_GB_per_device" in p for p in figure_problems(fig))


def test_a_title_must_name_where_its_numbers_come_from() -> None:
    assert source_problem("Step time") is not None
    for title in ("Step (measured)", "x (simulated)", "DP (re-enacted)", "y (published)"):
        assert source_problem(title) is None
    assert any("come from" in p for p in figure_problems(_bars(title="Bytes")))


def test_the_browser_ranges_take_precedence() -> None:
    drawn = {"yaxis": (0.0, 200.0)}
    assert figure_problems(_bars(), drawn_ranges=drawn) != []
    assert axis_problem("yaxis", (0, 2), (0, 2.2), log=False) is None


def test_tables_read_with_units_and_formats() -> None:
    rows = [{"name": "DDP", "ms": 2634.9, "fits": True}, {"name": "FSDP", "ms": 0.43612,
                                                          "fits": False}]
    columns = [Column("name", "strategy"), Column("ms", "step (ms)", "sig"),
               Column("fits", "fits?")]
    assert text_table(rows, columns).splitlines() == [
        "strategy  step (ms)  fits?", "DDP           2,635  yes", "FSDP          0.436  no"]
    assert figure_problems(table_figure(rows, columns, "Strategies (simulated)")) == []
    with pytest.raises(ValueError, match=r"rows\[0\]=.* lacks the field\(s\) \['ms', 'fits'\]"):
        text_table([{"name": "DDP"}], columns)


def _figures(items: list[Any]) -> list[go.Figure]:
    return [item for item in items if isinstance(item, go.Figure)]


SETTINGS: dict[str, list[tuple[Any, ...]]] = {
    "memory explorer": [("gpt2-124m", "h100-80gb", "fp32", "adam", 1),
                        ("llama-70b", "a100-40gb", "bf16 autocast", "sgd", 64)],
    "zero explorer": [("7B", 8, "mixed", "adam", False, 80, 1),
                      ("124M", 1024, "fp32", "sgd", True, 16, 16)],
    "ddp explorer": [("gpt2-124m", "h100-80gb", "NVLink 4 (H100)", 8, 25.0, 8, True),
                     ("gpt-1.3b", "a100-40gb", "PCIe 4.0 x16", 64, 1.0, 1, False)],
    "strategy dashboard": [("gpt2-124m", "h100-ib-128", "ddp", 8, 256, "mixed"),
                           ("llama-70b", "pcie-4gpu", "fsdp", 32, 64, "fp32"),
                           ("llama-7b", "h100-node", "dp", 4, 4096, "mixed")],
}


def _explore(name: str, args: tuple[Any, ...]) -> list[Any]:
    if name == "memory explorer":
        from dpsim.widgets.memory_explorer import explore as memory
        return memory(*args)
    if name == "zero explorer":
        from dpsim.widgets.zero_explorer import explore as zero
        return zero(*args)
    if name == "ddp explorer":
        from dpsim.widgets.ddp_explorer import explore as ddp
        return ddp(*args)
    from dpsim.widgets.strategy_dashboard import StrategyExplorer
    return StrategyExplorer().render(*args)


@pytest.mark.parametrize(("name", "args"), [(n, a) for n, s in SETTINGS.items() for a in s],
                         ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v)))
def test_every_dashboard_figure_reads_well_at_several_settings(name: str,
                                                               args: tuple[Any, ...]) -> None:
    figures = _figures(_explore(name, args))
    assert figures, f"{name} drew no figure at {args}"
    for fig in figures:
        assert figure_problems(fig) == [], f"{name} at {args}"


KINDS_DRAWN_TOGETHER = {  # the event kinds one strategy's timeline shows side by side
    "DataParallel": ("python", "scatter", "replicate", "gil_wait", "forward", "gather", "loss",
                     "backward", "grad_scatter", "reduce", "optimizer"),
    "DDP": ("forward", "backward", "all_reduce", "copy", "optimizer"),
    "FSDP": ("forward", "backward", "all_gather", "reduce_scatter", "optimizer"),
    "step split": ("compute", "hidden comm", "exposed comm", "host / GIL"),
}


@pytest.mark.parametrize("figure", list(KINDS_DRAWN_TOGETHER))
def test_kinds_drawn_together_have_their_own_colours(figure: str) -> None:
    from dpsim.viz.style import STEP_SPLIT_COLORS, color_for

    kinds = KINDS_DRAWN_TOGETHER[figure]
    colours = [STEP_SPLIT_COLORS.get(k) or color_for(k) for k in kinds]
    shared = {c: [k for k, ck in zip(kinds, colours, strict=True) if ck == c] for c in colours}
    assert {c: ks for c, ks in shared.items() if len(ks) > 1} == {}
    assert STEP_SPLIT_COLORS["compute"] not in {color_for("forward"), color_for("backward")}
