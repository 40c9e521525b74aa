"""Bad input to the GIL model (dpsim.sim.cost.gil): a prompt ValueError naming the field as written.

Bad calls go through the simulator's face (`dpsim.sim`), which checks the arguments; the
inner functions trust them.

Also: a config that used to simulate forever (infinite work, or millions of hand-overs) is
refused at once, the step estimate bounds what a simulation does, and accepted input
gives finite, non-negative times and speed-ups.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsim.sim import GILConfig, predict_speedup, schedule
from dpsim.sim import simulate_gil as simulate
from dpsim.sim.cost.gil import simulation_steps, thread_segments
from dpsim.sim.limits import MAX_CORES, MAX_CPU_S, MAX_STEPS, MAX_THREADS, MIN_SWITCH_INTERVAL_S
from tests.support.bad_input import outcome, raises_naming, wrong

INF, NAN = math.inf, math.nan

BAD_CALLS: list[tuple[str, Callable[[], Any], str]] = [
    ("config threads zero", lambda: GILConfig(n_threads=0), "n_threads"),
    ("config threads bool", lambda: GILConfig(n_threads=True), "n_threads"),
    ("config threads float", lambda: GILConfig(n_threads=wrong(2.0)), "n_threads"),
    ("config threads many", lambda: GILConfig(n_threads=MAX_THREADS + 1), "n_threads"),
    ("config work zero", lambda: GILConfig(work_s=0.0), "work_s"),
    ("config work negative", lambda: GILConfig(work_s=-1.0), "work_s"),
    ("config work inf", lambda: GILConfig(work_s=INF), "work_s"),
    ("config work nan", lambda: GILConfig(work_s=NAN), "work_s"),
    ("config work text", lambda: GILConfig(work_s=wrong("1")), "work_s"),
    ("config work too long", lambda: GILConfig(work_s=MAX_CPU_S * 2), "work_s"),
    ("config share nan", lambda: GILConfig(gil_share=NAN), "gil_share"),
    ("config share inf", lambda: GILConfig(gil_share=INF), "gil_share"),
    ("config share bool", lambda: GILConfig(gil_share=True), "gil_share"),
    ("config share above one", lambda: GILConfig(gil_share=1.5), "gil_share"),
    ("config ops zero", lambda: GILConfig(n_ops=0), "n_ops"),
    ("config ops float", lambda: GILConfig(n_ops=wrong(1.5)), "n_ops"),
    ("config ops bool", lambda: GILConfig(n_ops=True), "n_ops"),
    ("config ops many", lambda: GILConfig(n_ops=10**7), "n_ops"),
    ("config interval zero", lambda: GILConfig(switch_interval_s=0.0), "switch_interval_s"),
    ("config interval below 1 us", lambda: GILConfig(switch_interval_s=1e-7),
     "switch_interval_s"),
    ("config interval inf", lambda: GILConfig(switch_interval_s=INF), "switch_interval_s"),
    ("config interval nan", lambda: GILConfig(switch_interval_s=NAN), "switch_interval_s"),
    ("config cores zero", lambda: GILConfig(n_cores=0), "n_cores"),
    ("config cores bool", lambda: GILConfig(n_cores=True), "n_cores"),
    ("config cores float", lambda: GILConfig(n_cores=wrong(2.5)), "n_cores"),
    ("config cores many", lambda: GILConfig(n_cores=MAX_CORES + 1), "n_cores"),
    ("predict share nan", lambda: predict_speedup(NAN, 2), "gil_share"),
    ("predict threads zero", lambda: predict_speedup(0.5, 0), "n_threads"),
    ("predict threads 10**400", lambda: predict_speedup(0.5, 10**400), "n_threads"),
    ("predict threads bool", lambda: predict_speedup(0.5, True), "n_threads"),
    ("predict cores", lambda: predict_speedup(0.5, 2, 10**9), "n_cores"),
    ("simulate a dict", lambda: simulate(wrong({"n_threads": 2})), "config"),
    ("schedule none", lambda: schedule(wrong(None)), "threads"),
    ("schedule text", lambda: schedule(wrong("gil")), "threads"),
    ("schedule no threads", lambda: schedule([]), "threads"),
    ("schedule many threads", lambda: schedule([[("free", 1.0)]] * (MAX_THREADS + 1)),
     "threads"),
    ("schedule thread none", lambda: schedule(wrong([None])), "threads[0]"),
    ("schedule bare kind", lambda: schedule(wrong([["gil"]])), "threads[0][0]"),
    ("schedule short segment", lambda: schedule(wrong([[("free", 1.0)], [("gil",)]])),
     "threads[1][0]"),
    ("schedule kind", lambda: schedule([[("io", 1.0)]]), "threads[0][0] kind"),
    ("schedule seconds inf", lambda: schedule([[("gil", 1.0), ("gil", INF)]]),
     "threads[0][1] seconds"),
    ("schedule seconds nan", lambda: schedule([[("free", NAN)]]), "threads[0][0] seconds"),
    ("schedule seconds negative", lambda: schedule([[("free", -1.0)]]),
     "threads[0][0] seconds"),
    ("schedule seconds bool", lambda: schedule([[("free", True)]]), "threads[0][0] seconds"),
    ("schedule seconds too long", lambda: schedule([[("free", 1e9)]]),
     "threads[0][0] seconds"),
    ("schedule interval", lambda: schedule([[("gil", 1.0)]], 0.0), "switch_interval_s"),
    ("schedule interval nan", lambda: schedule([[("gil", 1.0)]], NAN), "switch_interval_s"),
    ("schedule cores", lambda: schedule([[("gil", 1.0)]], n_cores=0), "n_cores"),
    ("schedule cores many", lambda: schedule([[("gil", 1.0)]], n_cores=10**9), "n_cores"),
    ("schedule hand-overs", lambda: schedule([[("gil", 10.0)]] * 2, 1e-6),
     "switch_interval_s"),
    ("schedule segments", lambda: schedule([[("gil", 1e-4), ("free", 1e-4)] * 10**4]),
     "threads"),
    ("schedule too many segments", lambda: schedule([[("free", 0.0)] * (MAX_STEPS + 1)]),
     "threads"),
    ("simulate 1024 threads", lambda: simulate(GILConfig(n_threads=1024)), "n_threads"),
    ("simulate a million ops", lambda: simulate(GILConfig(n_ops=10**6)), "n_ops"),
    ("simulate an hour of Python", lambda: simulate(GILConfig(work_s=3600.0)),
     "switch_interval_s"),
]


@pytest.mark.parametrize(("call", "field"), [(c, f) for _, c, f in BAD_CALLS],
                         ids=[name for name, _, _ in BAD_CALLS])
def test_bad_input_is_refused_at_once_naming_the_field(call: Callable[[], Any],
                                                       field: str) -> None:
    start = time.perf_counter()
    with raises_naming(field):
        call()
    assert time.perf_counter() - start < 1.0


def test_infinite_work_is_refused_before_simulating() -> None:
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^work_s=inf is not finite; give a finite number > 0"):
        simulate(GILConfig(work_s=INF))
    assert time.perf_counter() - start < 1.0


def test_the_step_budget_is_stated() -> None:
    _, message = outcome(lambda: simulate(GILConfig(
        n_threads=2, work_s=1.0, gil_share=1.0, n_ops=1, switch_interval_s=MIN_SWITCH_INTERVAL_S)))
    assert message.startswith("switch_interval_s=1e-06 needs about 2,000,003 simulation steps")
    assert f"<= {MAX_STEPS:,}" in message
    assert "2,000,000 forced GIL hand-overs" in message


def test_a_million_ops_still_make_segments_quickly() -> None:
    start = time.perf_counter()
    segments = thread_segments(GILConfig(n_ops=10**6, gil_share=0.5))
    assert len(segments) == 2 * 10**6
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("config", [
    GILConfig(), GILConfig(8, 0.05, 0.1, 200), GILConfig(4, 0.02, 0.6, 20, n_cores=2),
    GILConfig(2, 0.05, 1.0, 10, switch_interval_s=0.001), GILConfig(16, 0.1, 1.0, 5),
    GILConfig(3, 0.006, 0.4, 6), GILConfig(64, 0.01, 0.3, 4, n_cores=3),
])
def test_events_stay_within_the_step_estimate(config: GILConfig) -> None:
    """Every event ends at a segment end, a forced hand-over or a GIL acquisition, and each
    acquisition follows one of the first two, so events <= 2 x estimated steps."""
    segments = thread_segments(config)
    gil_s = config.n_threads * sum(s for kind, s in segments if kind == "gil")
    steps, _ = simulation_steps(config.n_threads, config.n_threads * len(segments), gil_s,
                                config.switch_interval_s, config.n_cores)
    assert len(simulate(config).trace.events) <= 2 * steps


def test_teaching_configs_fit_the_budget_with_room() -> None:
    """The course's runs (notebook 04, exercise 4.1, the data-parallel strategy's 8 GPUs)."""
    from dpsim.sim.cost.gil import _config_cost

    for config in [GILConfig(8, 0.02, g, 100) for g in (0.0, 0.1, 0.25, 0.5, 1.0)] + [
            GILConfig(8, 0.05, 0.3, 200, n_cores=1), GILConfig(8, 0.02, 0.25, 100, n_cores=16)]:
        assert _config_cost(config) < MAX_STEPS / 2


# --- accepted input gives finite, non-negative answers -----------------------------------------
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 16), work=st.floats(1e-300, MAX_CPU_S), g=st.floats(0.0, 1.0),
       n_ops=st.integers(1, 200), interval=st.floats(MIN_SWITCH_INTERVAL_S, 10.0),
       cores=st.one_of(st.none(), st.integers(1, 32)))
def test_simulate_is_finite_or_refused_promptly(n: int, work: float, g: float, n_ops: int,
                                                interval: float, cores: int | None) -> None:
    config = GILConfig(n, work, g, n_ops, interval, cores)
    start = time.perf_counter()
    res, refused = outcome(lambda: simulate(config))
    if refused:
        assert refused.startswith(("switch_interval_s=", "n_ops=", "n_threads="))
        assert time.perf_counter() - start < 1.0
        return
    for value in (res.makespan_s, res.serial_s, res.speedup, res.predicted_speedup,
                  res.gil_busy_fraction):
        assert math.isfinite(value)
        assert value >= 0
    assert res.gil_busy_fraction <= 1 + 1e-9
    assert all(math.isfinite(e.end_s) and e.end_s >= e.start_s >= 0 for e in res.trace.events)


@settings(max_examples=60, deadline=None)
@given(g=st.floats(0.0, 1.0), n=st.integers(1, MAX_THREADS),
       cores=st.one_of(st.none(), st.integers(1, MAX_CORES)))
def test_closed_form_is_within_its_bounds(g: float, n: int, cores: int | None) -> None:
    bound = predict_speedup(g, n, cores)
    assert 1.0 <= bound <= n
