"""The GIL model (dpsim.sim.cost.gil), its figures, and the measurements
(dpsim.runtime.gil_measure)."""

from __future__ import annotations

import itertools
import sys

import plotly.graph_objects as go
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsim.runtime import gil_measure
from dpsim.sim import GILConfig, predict_speedup, schedule
from dpsim.sim import simulate_gil as simulate
from dpsim.sim.cost.gil import thread_segments
from dpsim.viz.gil import gil_timeline, speedup_chart

GIL_ON = gil_measure.gil_status()["gil_enabled"]


# --- the model's limits ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_no_gil_share_gives_n_times(n: int) -> None:
    res = simulate(GILConfig(n_threads=n, work_s=0.05, gil_share=0.0))
    assert res.speedup == pytest.approx(n, rel=1e-12)
    assert res.predicted_speedup == n
    assert res.makespan_s == pytest.approx(0.05, rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_all_gil_gives_one_time(n: int) -> None:
    res = simulate(GILConfig(n_threads=n, work_s=0.05, gil_share=1.0))
    assert res.speedup == pytest.approx(1.0, rel=1e-12)
    assert res.predicted_speedup == 1.0
    assert res.gil_busy_fraction == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize(("n", "cores"), [(4, 2), (8, 3), (2, 1)])
def test_cores_bound_gil_free_threads(n: int, cores: int) -> None:
    res = simulate(GILConfig(n_threads=n, work_s=0.05, gil_share=0.0, n_cores=cores))
    assert res.speedup == pytest.approx(min(n, cores), rel=1e-12)


def test_closed_form() -> None:
    assert predict_speedup(0.25, 8) == 4.0
    assert predict_speedup(0.25, 2) == 2.0
    assert predict_speedup(0.0, 6, n_cores=4) == 4.0
    assert predict_speedup(0.5, 6, n_cores=1) == 1.0


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(1, 6), st.one_of(st.none(), st.integers(1, 8)),
       st.integers(1, 30))
def test_simulation_never_beats_the_bound(g: float, n: int, cores: int | None,
                                          n_ops: int) -> None:
    res = simulate(GILConfig(n, 0.01, g, n_ops, n_cores=cores))
    assert res.speedup <= res.predicted_speedup * (1 + 1e-9)
    assert res.speedup >= 1.0 - 1e-9  # threads never lose work under this model


def test_fine_grained_work_reaches_the_bound() -> None:
    for g, n in [(0.25, 4), (0.5, 2), (0.1, 8)]:
        res = simulate(GILConfig(n, 0.05, g, 200))
        assert res.speedup == pytest.approx(res.predicted_speedup, rel=0.03)


def test_one_holder_at_a_time_and_segments_finish_in_order() -> None:
    trace = simulate(GILConfig(4, 0.02, 0.6, 20)).trace
    held = sorted((e.start_s, e.end_s) for e in trace.events if e.kind == "python")
    for (_, a1), (b0, _) in itertools.pairwise(held):
        assert b0 >= a1 - 1e-12
    for ends in trace.meta["segment_end_s"]:
        assert ends == sorted(ends)


def test_pure_python_threads_take_turns_of_one_switch_interval() -> None:
    for interval in (0.005, 0.001):
        trace = simulate(GILConfig(2, 0.05, 1.0, 10, switch_interval_s=interval)).trace
        turns = [e.duration_s for e in trace.filter(kind="python")][:-2]
        assert turns
        assert all(t == pytest.approx(interval, rel=1e-9) for t in turns)
        assert trace.filter(kind="gil_wait")


def test_schedule_reports_segment_ends_and_empty_segments() -> None:
    trace = schedule([[("free", 1.0), ("gil", 2.0), ("free", 0.0), ("gil", 1.0)],
                      [("gil", 3.0)]], switch_interval_s=10.0)
    assert trace.meta["segment_end_s"] == [[1.0, 5.0, 5.0, 6.0], [3.0]]
    waits = trace.filter(kind="gil_wait")
    assert [(e.device, e.start_s, e.end_s) for e in waits] == [(0, 1.0, 3.0)]


def test_deterministic_and_segments() -> None:
    cfg = GILConfig(3, 0.02, 0.3, 7)
    assert simulate(cfg).trace.to_dict() == simulate(cfg).trace.to_dict()
    segs = thread_segments(cfg)
    assert len(segs) == 14
    assert sum(s for _, s in segs) == pytest.approx(0.02)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_threads": 0}, "n_threads"), ({"gil_share": 1.2}, "gil_share"),
    ({"gil_share": -0.1}, "gil_share"), ({"work_s": 0.0}, "work_s"),
    ({"switch_interval_s": 0.0}, "switch_interval_s"), ({"n_cores": 0}, "n_cores"),
    ({"n_ops": 0}, "n_ops"),
])
def test_bad_config(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GILConfig(**kwargs)  # type: ignore[arg-type]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_threads"):
        predict_speedup(0.5, 0)
    with pytest.raises(ValueError, match=r"^threads\[0\]\[0\] kind='io'"):
        schedule([[("io", 1.0)]])
    with pytest.raises(ValueError, match=r"^threads=<0 threads> is out of range"):
        schedule([])
    with pytest.raises(ValueError, match="n_threads"):
        gil_measure.measure_scaling("python", (1, 0))
    with pytest.raises(ValueError, match="counts"):
        gil_measure.measure_scaling("python", (2, 4))
    with pytest.raises(ValueError, match="workload"):
        gil_measure.measure_scaling("java")
    with pytest.raises(ValueError, match="n_threads"):
        gil_measure.python_timeline(0)


# --- figures -------------------------------------------------------------------------------


def test_figures() -> None:
    fig = gil_timeline(simulate(GILConfig(3, 0.03, 0.5, 10)).trace)
    assert isinstance(fig, go.Figure)
    legend = [t.name for t in fig.data if t.showlegend]
    assert len(legend) == len(set(legend)) == 3
    chart = speedup_chart({"python, threads (measured)": ([1, 2], [1.0, 1.05]),
                           "model (simulated)": ([1, 2], [1.0, 1.0])})
    assert [t.line.dash for t in chart.data][:2] == ["solid", "dash"]
    with pytest.raises(ValueError, match="GIL events"):
        gil_timeline(simulate(GILConfig(1, 0.01, 0.5)).trace.__class__())


# --- measured on this machine (short, noisy: only robust facts are asserted) -----------------


def test_status_reports_the_interpreter() -> None:
    status = gil_measure.gil_status()
    assert status["switch_interval_s"] == sys.getswitchinterval()
    assert status["gil_enabled"] in (True, False)
    if not hasattr(sys, "_is_gil_enabled"):
        assert status["gil_enabled"] is True
        assert status["free_threaded_build"] is False


@pytest.mark.skipif(not GIL_ON, reason="a free-threaded interpreter runs threads in parallel")
def test_pure_python_threads_do_not_scale() -> None:
    res = gil_measure.measure_scaling("python", (1, 2), "threads", work_s=0.03, trials=2)
    assert res.speedups[0] == 1.0
    assert res.speedups[1] < 1.6  # the GIL lets one thread run Python at a time
    assert set(res.traces) == {1, 2}
    assert len(res.traces[2].filter(kind="work")) == 2


@pytest.mark.slow
def test_processes_and_torch_workloads_run() -> None:
    res = gil_measure.measure_scaling("python", (1, 2), "processes", work_s=0.02, trials=1)
    assert len(res.times_s) == 2
    assert all(t > 0 for t in res.times_s)
    for name in ("matmul", "rnn"):
        r = gil_measure.measure_scaling(name, (1, 2), "threads", work_s=0.02, trials=1)
        assert r.repeats >= 1
        assert all(t > 0 for t in r.times_s)
        assert r.rows()[0]["speedup"] == 1.0


@pytest.mark.skipif(not GIL_ON, reason="a free-threaded interpreter has no turns")
def test_measured_timeline_shows_turns() -> None:
    trace = gil_measure.python_timeline(2, duration_s=0.03, switch_interval_s=0.002)
    assert trace.source == "measured"
    assert {e.device for e in trace.filter(kind="python")} == {0, 1}
    assert trace.meta["switch_interval_s"] == 0.002
    assert sys.getswitchinterval() == pytest.approx(0.005)  # restored
    held = sorted((e.start_s, e.end_s) for e in trace.filter(kind="python"))
    overlap = sum(max(0.0, a1 - b0) for (_, a1), (b0, _) in itertools.pairwise(held))
    assert overlap < 0.1 * trace.end_s  # turns barely overlap (stamps are taken in Python)


def test_mixed_workload_measures_its_share() -> None:
    out = gil_measure.measure_mixed((1, 2), gil_share=0.5, work_s=0.02, trials=1)
    assert 0.0 < out["measured_gil_share"] < 1.0
    assert out["result"].counts == [1, 2]
