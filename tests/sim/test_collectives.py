"""Cost model, traffic accounting and the step-by-step ring (dpsim.sim.collectives)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsim.sim import (
    ALGORITHMS,
    COLLECTIVES,
    algbw_GBps,
    bus_bandwidth_factor,
    busbw_GBps,
    bytes_received_per_rank,
    bytes_sent_per_rank,
    chunk_bounds,
    collective_time_s,
    ring_all_reduce_steps,
)
from dpsim.sim.collectives.cost import ring_bytes_per_rank_formula, tree_levels
from dpsim.sim.collectives.ring import ring_reduce_scatter
from dpsim.sim.hardware import INFINIBAND_NDR, NVLINK4, Link
from tests.support.schedule import schedule, simulated_time_s, traffic_per_rank

LINK = Link("test link", bandwidth_GBps=2.0, latency_us=7.0)
ALPHA, B = 7e-6, 2e9

collectives = st.sampled_from(COLLECTIVES)
algorithms = st.sampled_from(ALGORITHMS)


# --- closed forms written out independently -----------------------------------------------
def test_ring_all_reduce_closed_form() -> None:
    n, s = 8, 64 * 2**20
    expected = 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * s / B
    assert collective_time_s("all_reduce", s, n, LINK) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter"])
def test_ring_all_gather_and_reduce_scatter_take_half_the_bandwidth_term(collective: str) -> None:
    n, s = 16, 10**8
    zero_latency = Link("no latency", 2.0, 0.0)
    half = collective_time_s(collective, s, n, zero_latency)
    full = collective_time_s("all_reduce", s, n, zero_latency)
    assert half == pytest.approx(full / 2, rel=1e-12)
    assert collective_time_s(collective, s, n, LINK) == pytest.approx(
        (n - 1) * ALPHA + (n - 1) / n * s / B, rel=1e-12)


def test_tree_and_naive_closed_forms() -> None:
    n, s = 8, 3 * 2**20
    levels = 3
    assert collective_time_s("broadcast", s, n, LINK, "tree") == pytest.approx(
        levels * (ALPHA + s / B))
    assert collective_time_s("all_reduce", s, n, LINK, "tree") == pytest.approx(
        2 * levels * (ALPHA + s / B))
    assert collective_time_s("all_reduce", s, n, LINK, "naive") == pytest.approx(
        2 * ALPHA + 2 * (n - 1) * s / B)
    assert collective_time_s("gather", s, n, LINK, "naive") == pytest.approx(
        ALPHA + (n - 1) / n * s / B)


def test_one_rank_costs_nothing() -> None:
    for c in COLLECTIVES:
        for a in ALGORITHMS:
            assert collective_time_s(c, 10**6, 1, LINK, a) == 0.0
            assert bytes_sent_per_rank(c, 10**6, 1, a) == [0]


def test_tree_levels() -> None:
    assert [tree_levels(n) for n in (1, 2, 3, 4, 5, 8, 9, 1024)] == [0, 1, 2, 2, 3, 3, 4, 10]


@settings(max_examples=150, deadline=None)
@given(collective=collectives, algorithm=algorithms, n=st.integers(1, 24),
       per_rank=st.integers(0, 10**6))
def test_simulated_time_equals_closed_form(collective: str, algorithm: str, n: int,
                                           per_rank: int) -> None:
    nbytes = per_rank * n  # whole chunks: the schedule and the formula see the same sizes
    rounds = schedule(collective, nbytes, n, algorithm)
    simulated = simulated_time_s(rounds, n, LINK)
    assert simulated == pytest.approx(collective_time_s(collective, nbytes, n, LINK, algorithm),
                                      rel=1e-12, abs=1e-15)


@settings(max_examples=100, deadline=None)
@given(collective=collectives, algorithm=algorithms, n=st.integers(1, 24),
       nbytes=st.integers(0, 10**6))
def test_uneven_chunks_differ_from_closed_form_by_at_most_a_byte_per_round(
        collective: str, algorithm: str, n: int, nbytes: int) -> None:
    rounds = schedule(collective, nbytes, n, algorithm)
    simulated = simulated_time_s(rounds, n, LINK)
    closed = collective_time_s(collective, nbytes, n, LINK, algorithm)
    assert abs(simulated - closed) <= len(rounds) * n / B + 1e-15


# --- traffic ------------------------------------------------------------------------------
@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 32), per_rank=st.integers(0, 10**7))
def test_ring_all_reduce_traffic_is_2_n_minus_1_over_n_of_s(n: int, per_rank: int) -> None:
    nbytes = per_rank * n
    expected = 2 * (n - 1) / n * nbytes
    assert bytes_sent_per_rank("all_reduce", nbytes, n) == [expected] * n
    assert bytes_received_per_rank("all_reduce", nbytes, n) == [expected] * n


def test_ring_bytes_formula_matches_the_schedule() -> None:
    for n in (1, 2, 3, 8):
        assert ring_bytes_per_rank_formula(n * 1000, n) == bytes_sent_per_rank(
            "all_reduce", n * 1000, n)[0]


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 32), nbytes=st.integers(0, 10**6))
def test_ring_all_reduce_traffic_uneven(n: int, nbytes: int) -> None:
    sent = bytes_sent_per_rank("all_reduce", nbytes, n)
    assert sum(sent) == 2 * (n - 1) * nbytes
    assert all(abs(b - 2 * (n - 1) / n * nbytes) <= 2 for b in sent)


@settings(max_examples=80, deadline=None)
@given(collective=collectives, algorithm=algorithms, n=st.integers(1, 20),
       nbytes=st.integers(0, 10**6))
def test_every_byte_sent_is_received(collective: str, algorithm: str, n: int, nbytes: int) -> None:
    sent, received = traffic_per_rank(schedule(collective, nbytes, n, algorithm), n)
    assert sent.sum() == received.sum()
    assert (sent >= 0).all()


def test_naive_root_is_the_hotspot() -> None:
    n, s = 8, 10**6
    naive = bytes_sent_per_rank("all_reduce", s, n, "naive")
    received = bytes_received_per_rank("all_reduce", s, n, "naive")
    assert naive[0] == received[0] == (n - 1) * s
    assert naive[1:] == [s] * (n - 1)
    ring = bytes_sent_per_rank("all_reduce", s, n, "ring")
    assert max(ring) < naive[0] / 3


def test_ring_scatter_and_gather_move_each_chunk_once_per_hop() -> None:
    n, s = 5, 5000
    assert bytes_sent_per_rank("scatter", s, n) == [4000, 3000, 2000, 1000, 0]
    assert bytes_received_per_rank("gather", s, n) == [4000, 3000, 2000, 1000, 0]
    assert bytes_sent_per_rank("broadcast", s, n) == [s] * (n - 1) + [0]


def test_large_world_size_is_fast_enough() -> None:
    sent = bytes_sent_per_rank("all_reduce", 2**30, 1024)
    assert len(sent) == 1024
    assert sum(sent) == 2 * 1023 * 2**30


# --- bandwidth ----------------------------------------------------------------------------
def test_bus_bandwidth_factors_match_nccl_tests() -> None:
    assert bus_bandwidth_factor("all_reduce", 4) == pytest.approx(1.5)
    assert bus_bandwidth_factor("all_gather", 4) == pytest.approx(0.75)
    assert bus_bandwidth_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert bus_bandwidth_factor("broadcast", 8) == 1.0
    assert bus_bandwidth_factor("reduce", 8) == 1.0


@settings(max_examples=60, deadline=None)
@given(collective=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]),
       n=st.integers(2, 1024))
def test_ring_busbw_approaches_link_bandwidth_for_large_messages(collective: str, n: int) -> None:
    nbytes = 2**40
    t = collective_time_s(collective, nbytes, n, NVLINK4)
    busbw = busbw_GBps(collective, nbytes, n, t)
    assert busbw <= NVLINK4.bandwidth_GBps * (1 + 1e-9)
    assert busbw > 0.99 * NVLINK4.bandwidth_GBps
    assert algbw_GBps(nbytes, t) == pytest.approx(busbw / bus_bandwidth_factor(collective, n))


def test_more_ranks_cost_more_latency() -> None:
    small = [collective_time_s("all_reduce", 1024, n, INFINIBAND_NDR) for n in (2, 8, 64, 1024)]
    assert small == sorted(small)
    assert small[-1] > 100 * small[0]


# --- the step-by-step ring ----------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 16), length=st.integers(0, 1000), seed=st.integers(0, 2**32 - 1))
def test_ring_steps_end_in_the_elementwise_sum(n: int, length: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(-1000, 1000, size=length) for _ in range(n)]
    steps = ring_all_reduce_steps(arrays)
    assert len(steps) == 1 + 2 * (n - 1)
    expected = np.sum(arrays, axis=0) if length else np.zeros(0, dtype=np.int64)
    for buf in steps[-1].buffers:
        np.testing.assert_array_equal(buf, expected)
    assert all(c == tuple(range(n)) for row in steps[-1].contributors for c in row)
    # inputs are untouched and the start shows them
    for buf, a in zip(steps[0].buffers, arrays, strict=True):
        np.testing.assert_array_equal(buf, a)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), length=st.integers(0, 200))
def test_ring_steps_send_one_chunk_to_the_right_neighbour(n: int, length: int) -> None:
    steps = ring_all_reduce_steps([np.ones(length) for _ in range(n)])
    sent = [0] * n
    for step in steps[1:]:
        assert [(s.src, s.dst) for s in step.sends] == [(r, (r + 1) % n) for r in range(n)]
        for s in step.sends:
            sent[s.src] += s.stop - s.start
    assert sum(sent) == 2 * (n - 1) * length


def test_ring_float_sum_is_close_and_partial_sums_grow() -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(10) for _ in range(4)]
    steps = ring_all_reduce_steps(arrays)
    np.testing.assert_allclose(steps[-1].buffers[2], np.sum(arrays, axis=0), rtol=1e-12)
    after_rs = steps[3]
    assert after_rs.phase == "reduce_scatter"
    assert after_rs.step == 3
    for rank in range(4):  # after reduce-scatter rank r owns the full sum of chunk r
        assert after_rs.contributors[rank][rank] == (0, 1, 2, 3)
    assert steps[4].phase == "all_gather"
    assert "step 1/3" in steps[4].label


def test_ring_reduce_scatter_gives_rank_r_chunk_r() -> None:
    arrays = [np.arange(7) * (r + 1) for r in range(3)]
    out = ring_reduce_scatter(arrays)
    total = np.sum(arrays, axis=0)
    for r, (a, b) in enumerate(chunk_bounds(7, 3)):
        np.testing.assert_array_equal(out[r], total[a:b])


def test_chunk_bounds_match_array_split() -> None:
    for length, n in [(0, 3), (2, 5), (10, 3), (1000, 16)]:
        sizes = [b - a for a, b in chunk_bounds(length, n)]
        assert sizes == [len(c) for c in np.array_split(np.zeros(length), n)]


# --- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"world_size": 0}, "world_size"),
    ({"world_size": -3}, "world_size"),
    ({"nbytes": -1}, "nbytes"),
    ({"algorithm": "butterfly"}, "algorithm"),
    ({"collective": "all_to_all"}, "collective"),
    ({"nbytes": 1.5}, "nbytes"),
])
def test_bad_input_names_the_field_and_what_is_allowed(kwargs: dict, field: str) -> None:
    args: dict[str, Any] = {"collective": "all_reduce", "nbytes": 1024, "world_size": 4,
                            "algorithm": "ring"}
    args.update(kwargs)
    with pytest.raises(ValueError, match=field) as info:
        collective_time_s(args["collective"], args["nbytes"], args["world_size"], LINK,
                          args["algorithm"])
    assert "allowed" in str(info.value) or "give" in str(info.value)
    with pytest.raises(ValueError, match=field):
        bytes_sent_per_rank(args["collective"], args["nbytes"], args["world_size"],
                            args["algorithm"])


def test_zero_bandwidth_is_refused() -> None:
    with pytest.raises(ValueError, match="bandwidth_GBps"):
        Link("broken", 0.0, 1.0)


def test_ring_steps_bad_input() -> None:
    with pytest.raises(ValueError, match="world_size"):
        ring_all_reduce_steps([])
    with pytest.raises(ValueError, match="same length"):
        ring_all_reduce_steps([np.zeros(3), np.zeros(4)])
    with pytest.raises(ValueError, match="1-D"):
        ring_all_reduce_steps([np.zeros((2, 2))])
    with pytest.raises(ValueError, match="time_s"):
        algbw_GBps(10, 0.0)
    assert math.isfinite(algbw_GBps(0, 1.0))


# --- figures and the explorer (built from the same functions) -----------------------------
def test_ring_animation_last_frame_is_the_elementwise_sum() -> None:
    from dpsim.viz.ring import ring_animation

    rng = np.random.default_rng(3)
    arrays = [rng.integers(0, 10, size=7) for _ in range(3)]
    fig = ring_animation(ring_all_reduce_steps(arrays))
    assert len(fig.frames) == 1 + 2 * 2
    assert fig.layout.sliders[0].steps[-1].label == "AG 2"
    assert fig.layout.updatemenus[0].buttons[0].label == "Play"
    grid = next(t for t in fig.frames[-1].data if t.type == "heatmap")
    total = [str(v) for v in np.sum(arrays, axis=0)]
    assert [list(row) for row in grid.text] == [total] * 3
    assert np.all(np.asarray(grid.z) == 3)  # every cell sums all 3 ranks
    first = next(t for t in fig.frames[0].data if t.type == "heatmap")
    assert np.all(np.asarray(first.z) == 1)
    with pytest.raises(ValueError, match="steps"):
        ring_animation([])


def test_ring_animation_handles_tiny_and_empty_arrays() -> None:
    from dpsim.viz.ring import ring_animation

    for n, length in ((1, 3), (4, 0), (5, 2), (7, 30)):
        fig = ring_animation(ring_all_reduce_steps([np.ones(length)] * n))
        assert len(fig.frames) == 1 + 2 * (n - 1)


def test_traffic_figure_shows_the_naive_hotspot() -> None:
    from dpsim.sim import rank_traffic
    from dpsim.viz.traffic import traffic_figure

    fig = traffic_figure(rank_traffic("all_reduce", 8 * 2**20, 8))
    naive_sent = next(t for t in fig.data if t.name == "bytes sent" and t.xaxis == "x")
    assert naive_sent.y[0] == 7 * 8 * 2**20
    assert max(naive_sent.y[1:]) == 8 * 2**20
    with pytest.raises(ValueError, match="algorithm"):
        rank_traffic("all_reduce", 1024, 4, algorithms=("ring", "hypercube"))


def test_bandwidth_and_prediction_figures() -> None:
    from dpsim.sim.collectives.series import bandwidth_series
    from dpsim.viz.traffic import bandwidth_figure, prediction_figure

    measured = {"hand": {1024: 1e-3, 2**20: 2e-3}, "torch": {1024: 5e-4, 2**20: 1e-3}}
    fig = bandwidth_figure(bandwidth_series(measured, 4), 4)
    busbw_torch = next(t for t in fig.data if t.xaxis == "x2" and t.legendgroup == "torch")
    assert busbw_torch.y[1] == pytest.approx(2**20 / 1e-3 / 1e9 * 1.5)
    fig = prediction_figure([1024, 2048], [1e-3, 2e-3], [1.1e-3, 1.9e-3])
    assert next(t.name for t in fig.data) == "measured"


def test_explorer_numbers_match_the_closed_form() -> None:
    from dpsim.widgets.collectives_explorer import PRESETS, collectives_explorer, estimate, explore

    link = PRESETS["InfiniBand cluster"].link
    est = estimate("all_reduce", 2**30, 128, link.latency_us, link.bandwidth_GBps)
    t = collective_time_s("all_reduce", 2**30, 128, link)
    assert est.time_s == pytest.approx(t)
    assert est.busbw_GBps == pytest.approx(2**30 / t / 1e9 * 2 * 127 / 128)
    assert 0 < est.latency_share < 0.05
    assert PRESETS["NVLink node"].world_size == 8
    assert PRESETS["PCIe box"].world_size == 4
    text, fig = explore("all_gather", "tree", 1024, 1024, 6.0, 50.0)
    assert "simulated" in text
    assert "1024 ranks" in text
    assert len(fig.data) == 8
    with pytest.raises(ValueError, match="bandwidth_GBps"):
        estimate("all_reduce", 1024, 4, 1.0, 0.0)
    box = collectives_explorer("PCIe box")
    chooser = box.children[0]
    chooser.value = "InfiniBand cluster"  # a preset moves the sliders
    sliders = box.children[1].children + box.children[2].children  # the chooser, then rows
    values = {w.description: w.value for w in sliders}
    assert values["N ranks"] == 128
    # the presets start at what NCCL achieves on the link, not its spec, and say so
    from dpsim.sim.collectives.group_cost import achieved_link
    assert PRESETS["NVLink node"].link == achieved_link(NVLINK4)
    assert PRESETS["NVLink node"].link.bandwidth_GBps < NVLINK4.bandwidth_GBps
    assert "achieved GB/s" in values


# --- the alpha-beta fit and the series figures draw ----------------------------------------
def test_fit_link_recovers_alpha_and_beta_under_both_weightings() -> None:
    from dpsim.sim import cost_terms, fit_link

    truth = Link("truth", bandwidth_GBps=2.0, latency_us=30.0)
    sizes = [2**k for k in range(12, 25, 2)]
    times = [collective_time_s("all_reduce", s, 4, truth) for s in sizes]
    k, f = cost_terms("all_reduce", 4)
    for weighting in ("relative", "absolute"):
        link = fit_link(sizes, times, k, f, "fit", weighting)
        assert link.latency_us == pytest.approx(30.0, rel=1e-6)
        assert link.bandwidth_GBps == pytest.approx(2.0, rel=1e-6)
    flat = fit_link([1024, 2048], [1e-3, 1e-3], k, f, "flat", "absolute")  # no slope
    assert flat.bandwidth_GBps == 1e3
    assert flat.latency_us == pytest.approx(1e3 / k)
    with pytest.raises(ValueError, match="weighting"):
        fit_link(sizes, times, k, f, "fit", "median")
    with pytest.raises(ValueError, match=r"times_s\[0\]=0.0 is out of range"):
        fit_link([1024, 2048], [0.0, 1e-3], k, f, "fit", "absolute")


def test_series_for_figures_match_the_closed_forms() -> None:
    from dpsim.sim.collectives.series import bandwidth_series, model_series, rank_traffic

    traffic = rank_traffic("all_reduce", 8 * 2**20, 8)
    assert list(traffic.sent) == ["naive", "tree", "ring"]
    assert traffic.received["ring"] == bytes_received_per_rank("all_reduce", 8 * 2**20, 8)
    assert traffic.ring_formula_bytes == ring_bytes_per_rank_formula(8 * 2**20, 8)
    curves = model_series("all_gather", 4, NVLINK4, [1024, 2**20])
    assert list(curves) == list(ALGORITHMS)
    t = collective_time_s("all_gather", 2**20, 4, NVLINK4, "tree")
    assert curves["tree"].time_s[1] == t
    assert curves["tree"].busbw_GBps[1] == busbw_GBps("all_gather", 2**20, 4, t)
    assert model_series("all_reduce", 1, NVLINK4, [1024])["ring"].busbw_GBps == [0.0]
    measured = bandwidth_series({"torch": {2**20: 1e-3, 1024: 5e-4}}, 4)["torch"]
    assert measured.sizes_bytes == [1024, 2**20]
    assert measured.algbw_GBps[1] == algbw_GBps(2**20, 1e-3)
