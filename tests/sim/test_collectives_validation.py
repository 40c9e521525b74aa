"""Bad input to dpsim.sim.collectives: a prompt ValueError naming the field as the caller wrote it.

Bad input goes through the simulator's face (`dpsim.sim`), which checks arguments by their
hints; inner functions (tree_levels, chunk_sizes, the traffic formula) trust theirs.

Also: calls that used to run forever (one entry per rank for 10**9 ranks) now answer at
once, the closed-form bytes per rank equal the round-by-round schedule's, and accepted
input never gives NaN, inf or negative seconds or bytes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsim.sim import (
    ALGORITHMS,
    COLLECTIVES,
    algbw_GBps,
    bandwidth_series,
    bus_bandwidth_factor,
    busbw_GBps,
    bytes_received_per_rank,
    bytes_sent_per_rank,
    chunk_bounds,
    collective_time_s,
    cost_terms,
    fit_link,
    model_series,
    rank_traffic,
    ring_all_reduce_steps,
)
from dpsim.sim.collectives.cost import tree_levels
from dpsim.sim.collectives.ring import chunk_sizes, ring_reduce_scatter
from dpsim.sim.collectives.traffic import bytes_per_rank
from dpsim.sim.hardware import NVLINK4, Link
from dpsim.sim.limits import MAX_LISTED_RANKS, MAX_NBYTES, MAX_SCHEDULE_RANKS, MAX_WORLD_SIZE
from tests.support.bad_input import outcome, raises_naming, wrong
from tests.support.schedule import (
    Round,
    round_time_s,
    schedule,
    simulated_time_s,
    traffic_per_rank,
)

INF, NAN = math.inf, math.nan
SIZES, TIMES = [1024, 2048], [1e-3, 2e-3]


def _round(src: list[int], dst: list[int], nbytes: list[int]) -> Round:
    return Round(np.array(src), np.array(dst), np.array(nbytes), "test")


GOOD_ROUND = _round([0, 1], [1, 0], [8, 8])

BAD_CALLS: list[tuple[str, Callable[[], Any], str]] = [
    # cost: closed forms
    ("time collective", lambda: collective_time_s("all_to_all", 1, 2, NVLINK4), "collective"),
    ("time algorithm", lambda: collective_time_s("all_reduce", 1, 2, NVLINK4, "mesh"),
     "algorithm"),
    ("time negative bytes", lambda: collective_time_s("all_reduce", -1, 2, NVLINK4), "nbytes"),
    ("time float bytes", lambda: collective_time_s("all_reduce", wrong(1.5), 2, NVLINK4), "nbytes"),
    ("time nan bytes", lambda: collective_time_s("all_reduce", wrong(NAN), 2, NVLINK4), "nbytes"),
    ("time bool bytes", lambda: collective_time_s("all_reduce", True, 2, NVLINK4), "nbytes"),
    ("time huge bytes", lambda: collective_time_s("all_reduce", MAX_NBYTES + 1, 2, NVLINK4),
     "nbytes"),
    ("time zero ranks", lambda: collective_time_s("all_reduce", 1, 0, NVLINK4), "world_size"),
    ("time bool ranks", lambda: collective_time_s("all_reduce", 1, True, NVLINK4),
     "world_size"),
    ("time float ranks", lambda: collective_time_s("all_reduce", 1, wrong(4.0), NVLINK4),
     "world_size"),
    ("time 10**400 ranks", lambda: collective_time_s("all_reduce", 1, 10**400, NVLINK4),
     "world_size"),
    ("time no link", lambda: collective_time_s("all_reduce", 1, 2, wrong(None)), "link"),
    # a Link refuses non-finite and extreme numbers itself, where it is built
    ("time inf latency", lambda: collective_time_s("all_reduce", 1, 2, Link("x", 1.0, INF)),
     "latency_us"),
    ("time inf bandwidth", lambda: collective_time_s("all_reduce", 1, 2, Link("x", INF, 1.0)),
     "bandwidth_GBps"),
    ("time overflowing latency",
     lambda: collective_time_s("all_reduce", 1, 1 << 20, Link("x", 1.0, 1e308)),
     "latency_us"),
    ("time overflowing bandwidth",
     lambda: collective_time_s("all_reduce", 1 << 40, 8, Link("x", 5e-324, 1.0)),
     "bandwidth_GBps"),
    ("terms ranks", lambda: cost_terms("all_reduce", 0), "world_size"),
    ("terms algorithm", lambda: cost_terms("all_reduce", 2, "Ring"), "algorithm"),
    ("busbw factor collective", lambda: bus_bandwidth_factor("alltoall", 2), "collective"),
    ("busbw factor ranks", lambda: bus_bandwidth_factor("all_reduce", -2), "world_size"),
    ("algbw zero time", lambda: algbw_GBps(10, 0.0), "time_s"),
    ("algbw nan time", lambda: algbw_GBps(10, NAN), "time_s"),
    ("algbw inf time", lambda: algbw_GBps(10, INF), "time_s"),
    ("algbw text time", lambda: algbw_GBps(10, wrong("1")), "time_s"),
    ("algbw overflow", lambda: algbw_GBps(1 << 40, 5e-324), "time_s"),
    ("algbw bytes", lambda: algbw_GBps(-1, 1.0), "nbytes"),
    ("busbw collective", lambda: busbw_GBps("x", 10, 2, 1.0), "collective"),
    ("busbw time", lambda: busbw_GBps("all_reduce", 10, 2, -1.0), "time_s"),
    ("sent 10**9 ranks", lambda: bytes_sent_per_rank("all_reduce", 1 << 20, 10**9),
     "world_size"),
    ("sent too many ranks",
     lambda: bytes_sent_per_rank("all_reduce", 1, MAX_LISTED_RANKS + 1), "world_size"),
    ("received 10**9 ranks", lambda: bytes_received_per_rank("gather", 1, 10**9, "tree"),
     "world_size"),
    ("sent huge bytes", lambda: bytes_sent_per_rank("all_reduce", 2**62, 4, "naive"),
     "nbytes"),
    # ring
    ("chunks 10**9", lambda: chunk_bounds(10, 10**9), "n_chunks"),
    ("chunks zero", lambda: chunk_bounds(10, 0), "n_chunks"),
    ("chunks bool", lambda: chunk_bounds(10, True), "n_chunks"),
    ("chunks length", lambda: chunk_bounds(-1, 2), "length"),
    ("chunks float length", lambda: chunk_bounds(wrong(2.5), 2), "length"),
    ("steps text", lambda: ring_all_reduce_steps(wrong("abc")), "arrays"),
    ("steps 2-D array", lambda: ring_all_reduce_steps(wrong(np.zeros((2, 3)))), "arrays"),
    ("steps empty", lambda: ring_all_reduce_steps([]), "arrays"),
    ("steps 33 ranks", lambda: ring_all_reduce_steps([np.zeros(2)] * 33), "len(arrays)"),
    ("steps 2-D rank", lambda: ring_all_reduce_steps([np.zeros((2, 2))]), "arrays[0].shape"),
    ("steps lengths", lambda: ring_all_reduce_steps([np.zeros(3), np.zeros(4)]),
     "arrays[1].shape"),
    ("steps text values", lambda: ring_all_reduce_steps([np.array(["a"])]), "arrays[0].dtype"),
    ("steps bools", lambda: ring_all_reduce_steps([np.array([True])]), "arrays[0].dtype"),
    ("steps ragged", lambda: ring_all_reduce_steps(wrong([[1, [2, 3]]])), "arrays[0]"),
    ("steps nan", lambda: ring_all_reduce_steps([np.array([1.0, NAN]), np.zeros(2)]),
     "arrays[0][1]"),
    ("steps inf", lambda: ring_all_reduce_steps([np.zeros(2), np.array([INF, 1.0])]),
     "arrays[1][0]"),
    ("steps float overflow", lambda: ring_all_reduce_steps([np.array([1e308])] * 2),
     "arrays[0][0]"),
    ("steps int8 overflow", lambda: ring_all_reduce_steps([np.array([100], np.int8)] * 2),
     "arrays[0][0]"),
    ("steps too long", lambda: ring_all_reduce_steps([np.zeros(10**6)] * 8), "arrays[0].shape"),
    ("reduce-scatter lengths", lambda: ring_reduce_scatter([np.zeros(1), np.zeros(2)]),
     "arrays[1].shape"),
    # schedule
    ("schedule ranks", lambda: schedule("all_reduce", 1, MAX_SCHEDULE_RANKS + 1), "world_size"),
    ("schedule 10**9 ranks", lambda: schedule("broadcast", 1, 10**9), "world_size"),
    ("schedule bytes", lambda: schedule("all_reduce", -5, 4), "nbytes"),
    ("schedule algorithm", lambda: schedule("all_reduce", 5, 4, wrong(None)), "algorithm"),
    ("round none", lambda: round_time_s(wrong(None), 2, NVLINK4), "rnd"),
    ("round ranks", lambda: round_time_s(GOOD_ROUND, 0, NVLINK4), "world_size"),
    ("round link", lambda: round_time_s(GOOD_ROUND, 2, wrong("nvlink")), "link"),
    ("round rank too high", lambda: round_time_s(_round([0, 2], [1, 0], [8, 8]), 2, NVLINK4),
     "rnd.src[1]"),
    ("round negative bytes", lambda: round_time_s(_round([0], [1], [-8]), 2, NVLINK4),
     "rnd.nbytes[0]"),
    ("round lengths", lambda: round_time_s(_round([0, 1], [1], [8, 8]), 2, NVLINK4),
     "len(rnd.dst)"),
    ("round float ranks", lambda: round_time_s(Round(np.array([0.0]), np.array([1]),
                                                     np.array([8]), "x"), 2, NVLINK4),
     "rnd.src"),
    ("rounds text", lambda: simulated_time_s(wrong("rounds"), 2, NVLINK4), "rounds"),
    ("rounds none inside", lambda: simulated_time_s(wrong([GOOD_ROUND, None]), 2, NVLINK4),
     "rounds[1]"),
    ("rounds rank too high", lambda: traffic_per_rank([GOOD_ROUND, _round([0], [5], [1])], 2),
     "rounds[1].dst[0]"),
    ("rounds huge ranks", lambda: traffic_per_rank([GOOD_ROUND], 10**9), "world_size"),
    ("rounds overflow int64", lambda: traffic_per_rank(
        [Round(np.zeros(1 << 16, np.int64), np.ones(1 << 16, np.int64),
               np.full(1 << 16, MAX_NBYTES), "x")] * 3, 2), "rounds"),
    # series
    ("traffic algorithms text", lambda: rank_traffic("all_reduce", 8, 4, "ring"),
     "algorithms"),
    ("traffic algorithm", lambda: rank_traffic("all_reduce", 8, 4, ("ring", "mesh")),
     "algorithms[1]"),
    ("traffic collective", lambda: rank_traffic("x", 8, 4, ()), "collective"),
    ("traffic ranks", lambda: rank_traffic("all_reduce", 8, 10**6), "world_size"),
    ("measured list", lambda: bandwidth_series(wrong([]), 4), "measured"),
    ("measured inner", lambda: bandwidth_series(wrong({"t": [1.0]}), 4), "measured['t']"),
    ("measured size", lambda: bandwidth_series(wrong({"t": {1.5: 1e-3}}), 4), "measured['t'] size"),
    ("measured zero time", lambda: bandwidth_series({"t": {1024: 0.0}}, 4),
     "measured['t'][1024]"),
    ("measured nan", lambda: bandwidth_series({"t": {1024: NAN}}, 4), "measured['t'][1024]"),
    ("measured inf", lambda: bandwidth_series({"t": {1024: INF}}, 4), "measured['t'][1024]"),
    ("measured overflow", lambda: bandwidth_series({"t": {1 << 40: 5e-324}}, 4),
     f"measured['t'][{1 << 40}]"),
    ("measured ranks", lambda: bandwidth_series({}, 0), "world_size"),
    ("measured collective", lambda: bandwidth_series({}, 4, "x"), "collective"),
    ("model sizes text", lambda: model_series("all_reduce", 4, NVLINK4, wrong("abc")),
     "sizes_bytes"),
    ("model size", lambda: model_series("all_reduce", 4, NVLINK4, [1, -1]), "sizes_bytes[1]"),
    ("model link", lambda: model_series("all_reduce", 4, wrong(None), [1]), "link"),
    ("model algorithm", lambda: model_series("all_reduce", 4, NVLINK4, [1], ["x"]),
     "algorithms[0]"),
    ("model ranks", lambda: model_series("all_reduce", 0, NVLINK4, [1]), "world_size"),
    # fit
    ("fit weighting", lambda: fit_link(SIZES, TIMES, 2, 1.0, "f", "median"), "weighting"),
    ("fit sizes none", lambda: fit_link(wrong(None), TIMES, 2, 1.0, "f"), "sizes_bytes"),
    ("fit lengths", lambda: fit_link([1, 2, 3], TIMES, 2, 1.0, "f"), "times_s"),
    ("fit one point", lambda: fit_link([1], [1e-3], 2, 1.0, "f"), "sizes_bytes"),
    ("fit size", lambda: fit_link([-1, 2], TIMES, 2, 1.0, "f"), "sizes_bytes[0]"),
    ("fit zero time", lambda: fit_link(SIZES, [0.0, 1e-3], 2, 1.0, "f"), "times_s[0]"),
    ("fit nan time", lambda: fit_link(SIZES, [1e-3, NAN], 2, 1.0, "f"), "times_s[1]"),
    ("fit inf time", lambda: fit_link(SIZES, [INF, 1e-3], 2, 1.0, "f", "absolute"),
     "times_s[0]"),
    ("fit tiny time", lambda: fit_link(SIZES, [5e-324, 1e-3], 2, 1.0, "f"), "times_s[0]"),
    ("fit n_alpha", lambda: fit_link(SIZES, TIMES, -1, 1.0, "f"), "n_alpha"),
    ("fit n_alpha bool", lambda: fit_link(SIZES, TIMES, True, 1.0, "f"), "n_alpha"),
    ("fit s_over_b nan", lambda: fit_link(SIZES, TIMES, 2, NAN, "f"), "s_over_b"),
    ("fit s_over_b inf", lambda: fit_link(SIZES, TIMES, 2, INF, "f"), "s_over_b"),
    ("fit name", lambda: fit_link(SIZES, TIMES, 2, 1.0, wrong(None)), "name"),
    ("fit nothing to fit", lambda: fit_link(SIZES, TIMES, 0, 0.0, "f"), "n_alpha"),
]


@pytest.mark.parametrize(("call", "field"), [(c, f) for _, c, f in BAD_CALLS],
                         ids=[name for name, _, _ in BAD_CALLS])
def test_bad_input_is_refused_at_once_naming_the_field(call: Callable[[], Any],
                                                       field: str) -> None:
    start = time.perf_counter()
    with raises_naming(field):
        call()
    assert time.perf_counter() - start < 1.0


# --- calls that used to run forever ---------------------------------------------------------
def test_former_hangs_answer_promptly() -> None:
    start = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^n_chunks=1000000000 is out of range; allowed "
                                         rf">= 1 and <= {MAX_LISTED_RANKS}"):
        chunk_bounds(10, 10**9)
    with pytest.raises(ValueError, match=r"^world_size=1000000000 is out of range"):
        bytes_sent_per_rank("all_reduce", 1 << 20, 10**9)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_most_listed_ranks_answer_by_formula(algorithm: str) -> None:
    n = MAX_LISTED_RANKS
    for collective in COLLECTIVES:
        sent, received = bytes_per_rank(collective, MAX_NBYTES, n, algorithm)
        assert len(sent) == len(received) == n
        assert sent.sum() == received.sum()
        assert (sent >= 0).all()
        assert (received >= 0).all()
    naive = bytes_sent_per_rank("all_reduce", MAX_NBYTES, n, "naive")
    assert naive[0] == (n - 1) * MAX_NBYTES  # the root's bytes, no int64 overflow
    assert isinstance(naive[0], int)


def test_closed_forms_stay_finite_at_the_bounds() -> None:
    for collective in COLLECTIVES:
        for algorithm in ALGORITHMS:
            t = collective_time_s(collective, MAX_NBYTES, MAX_WORLD_SIZE, NVLINK4, algorithm)
            assert math.isfinite(t)
            assert t > 0
    assert tree_levels(MAX_WORLD_SIZE) == 22
    assert busbw_GBps("all_reduce", MAX_NBYTES, MAX_WORLD_SIZE, 1e-9) > 0


# --- the formula equals the schedule it replaced ------------------------------------------------
@pytest.mark.parametrize("n", [*range(1, 34), 64, 65, 129])
def test_bytes_per_rank_by_formula_equal_the_schedule(n: int) -> None:
    for nbytes in sorted({0, 1, n - 1, n + 1, 7 * n + 3, 10**6 + 17}):
        for collective in COLLECTIVES:
            for algorithm in ALGORITHMS:
                expected = traffic_per_rank(schedule(collective, nbytes, n, algorithm), n)
                got = bytes_per_rank(collective, nbytes, n, algorithm)
                assert np.array_equal(got[0], expected[0]), (collective, algorithm, nbytes)
                assert np.array_equal(got[1], expected[1]), (collective, algorithm, nbytes)


@settings(max_examples=30, deadline=None)
@given(collective=st.sampled_from(COLLECTIVES), algorithm=st.sampled_from(ALGORITHMS),
       n=st.integers(1, 200), nbytes=st.integers(0, 2**40))
def test_formula_equals_schedule_at_random(collective: str, algorithm: str, n: int,
                                           nbytes: int) -> None:
    expected = traffic_per_rank(schedule(collective, nbytes, n, algorithm), n)
    assert bytes_sent_per_rank(collective, nbytes, n, algorithm) == expected[0].tolist()
    assert bytes_received_per_rank(collective, nbytes, n, algorithm) == expected[1].tolist()


def test_chunk_sizes_match_chunk_bounds() -> None:
    for length, n in [(0, 1), (0, 5), (3, 5), (10, 3), (1000, 16), (2**40 + 3, 7)]:
        assert chunk_sizes(length, n).tolist() == [b - a for a, b in chunk_bounds(length, n)]


# --- accepted input gives finite, non-negative answers -----------------------------------------
finite_positive = st.floats(1e-300, 1e300, allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None)
@given(collective=st.sampled_from(COLLECTIVES), algorithm=st.sampled_from(ALGORITHMS),
       n=st.integers(1, MAX_WORLD_SIZE), nbytes=st.integers(0, MAX_NBYTES),
       bandwidth=finite_positive, latency=st.floats(0, 1e300))
def test_time_is_finite_or_the_link_is_named(collective: str, algorithm: str, n: int,
                                             nbytes: int, bandwidth: float,
                                             latency: float) -> None:
    t, refused = outcome(lambda: collective_time_s(collective, nbytes, n,
                                                   Link("l", bandwidth, latency), algorithm))
    if refused:  # by the Link where it is built, or by the time it would give
        assert refused.startswith(("link.latency_us=", "link.bandwidth_GBps=", "latency_us=",
                                   "bandwidth_GBps="))
    else:
        assert math.isfinite(t)
        assert t >= 0


@settings(max_examples=100, deadline=None)
@given(nbytes=st.integers(0, MAX_NBYTES), time_s=finite_positive,
       n=st.integers(1, MAX_WORLD_SIZE))
def test_bandwidths_are_finite_or_the_time_is_named(nbytes: int, time_s: float,
                                                    n: int) -> None:
    values, refused = outcome(lambda: [algbw_GBps(nbytes, time_s),
                                       busbw_GBps("all_reduce", nbytes, n, time_s)])
    if refused:
        assert refused.startswith("time_s=")
    else:
        assert all(math.isfinite(v) and v >= 0 for v in values)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, MAX_NBYTES), min_size=2, max_size=8),
       data=st.data(), n_alpha=st.integers(0, 64), s_over_b=st.floats(0, 64),
       weighting=st.sampled_from(("relative", "absolute")))
def test_fit_gives_a_finite_link_or_names_the_field(sizes: list[int], data: st.DataObject,
                                                    n_alpha: int, s_over_b: float,
                                                    weighting: str) -> None:
    times = data.draw(st.lists(st.floats(1e-12, 1e6), min_size=len(sizes),
                               max_size=len(sizes)))
    link, refused = outcome(lambda: fit_link(sizes, times, n_alpha, s_over_b, "fit", weighting))
    if refused:
        assert refused.startswith(("n_alpha=0 with", "times_s="))
    else:
        assert math.isfinite(link.bandwidth_GBps)
        assert link.bandwidth_GBps > 0
        assert math.isfinite(link.latency_us)
        assert link.latency_us >= 0


def test_valid_calls_answer_as_before() -> None:
    """Numbers the course shows, unchanged by the checks."""
    link = Link("toy", bandwidth_GBps=1.0, latency_us=10.0)
    assert round(collective_time_s("all_reduce", 4_000_000, 4, link) * 1e3, 3) == 6.06
    assert bytes_sent_per_rank("scatter", 5000, 5) == [4000, 3000, 2000, 1000, 0]
    assert chunk_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    steps = ring_all_reduce_steps([np.array([1, 2, 3]), np.array([10, 20, 30])])
    assert steps[-1].buffers[0].tolist() == [11, 22, 33]
    assert round_time_s(GOOD_ROUND, 2, link) == pytest.approx(10e-6 + 8 / 1e9)
    assert simulated_time_s([], 2, link) == 0
    assert model_series("all_reduce", 4, link, [])["ring"].time_s == []
