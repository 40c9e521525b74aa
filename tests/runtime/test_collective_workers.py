"""Real gloo ranks: every collective before/after, the hand ring == dist.all_reduce, timing,
and the alpha-beta calibration fit."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dpsim.runtime.collective_workers import (
    SHOWN_COLLECTIVES,
    check_ring_all_reduce,
    ring_all_reduce_,
    show_collective,
    time_all_reduce,
)
from dpsim.runtime.launch import launch
from dpsim.runtime.link_calibration import fit_alpha_beta
from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.hardware import Link

SIZES = (0, 1, 2, 3, 5, 17, 1000, 4099, 70_001)  # empty, shorter than N, uneven, segmented


def _everything(rank: int, world_size: int) -> dict[str, Any]:
    """One launch does all the real-rank checks (launches cost seconds each)."""
    shown = {c: show_collective(rank, world_size, c, n_elements=2) for c in SHOWN_COLLECTIVES}
    errors = {}
    for n in SIZES:
        for segment in (None, 4096, "batched"):  # one segment per chunk; several; NCCL's way
            errors[(n, segment)] = check_ring_all_reduce(
                rank, world_size, n, seed=n,
                ring=lambda t, s=segment: ring_all_reduce_(  # type: ignore[misc]
                    t, segment_nbytes=None if s == "batched" else s, batched=s == "batched"))
    # float64 and a 2-D tensor go through the same code path
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (rank + 1)
    ring_all_reduce_(x)
    timed = time_all_reduce(rank, world_size, [4096, 65536], repeats=1)
    return {"shown": shown, "errors": errors, "matrix": x, "timed": timed}


@pytest.fixture(scope="module")
def four_ranks() -> list[dict[str, Any]]:
    return launch(_everything, 4, backend="gloo", timeout_s=120)


@pytest.mark.slow
def test_hand_ring_equals_dist_all_reduce_on_4_gloo_ranks(four_ranks: list[dict]) -> None:
    for rank, result in enumerate(four_ranks):
        for (n, segment), err in result["errors"].items():
            assert err["shape"] == err["expected_shape"] == (n,), (rank, n, segment)
            assert err["max_abs_error"] <= 1e-5, (rank, n, segment, err)
        expected = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (1 + 2 + 3 + 4)
        assert torch.equal(result["matrix"], expected)


@pytest.mark.slow
def test_each_collective_before_and_after(four_ranks: list[dict]) -> None:
    shown = [r["shown"] for r in four_ranks]
    own = [[10.0 * (r + 1), 10.0 * (r + 1) + 1] for r in range(4)]
    total = [sum(o[0] for o in own), sum(o[1] for o in own)]
    assert [s["broadcast"]["after"] for s in shown] == [own[0]] * 4
    assert [s["all_reduce"]["after"] for s in shown] == [total] * 4
    assert shown[0]["reduce"]["after"] == total
    assert shown[1]["reduce"]["after"] is None
    assert [s["all_gather"]["after"] for s in shown] == [own] * 4
    assert shown[0]["gather"]["after"] == own
    assert shown[2]["gather"]["after"] is None
    pieces = shown[0]["scatter"]["before"]
    assert [s["scatter"]["after"] for s in shown] == pieces
    assert shown[1]["scatter"]["before"] is None
    for r, s in enumerate(shown):  # reduce_scatter: rank r gets the sum of everyone's piece r
        expected = [sum(x["reduce_scatter"]["before"][r][i] for x in shown) for i in range(2)]
        assert s["reduce_scatter"]["after"] == expected
        assert s["all_reduce"]["before"] == own[r]


@pytest.mark.slow
def test_timing_sweep_returns_positive_medians(four_ranks: list[dict]) -> None:
    timed = four_ranks[0]["timed"]
    assert set(timed) == {"hand", "torch"}
    for impl in timed:
        assert sorted(timed[impl]) == [4096, 65536]
        assert all(0 < t < 10 for t in timed[impl].values())
    assert four_ranks[1]["timed"] == timed  # max over ranks: every rank reports the same


def test_bad_collective_name_is_refused_before_any_launch() -> None:
    with pytest.raises(ValueError, match="collective"):
        show_collective(0, 1, "all_to_all")


# --- calibration fit (pure arithmetic on measured numbers) --------------------------------
def test_fit_recovers_alpha_and_beta_from_exact_times() -> None:
    truth = Link("truth", bandwidth_GBps=1.7, latency_us=45.0)
    sizes = [2**k for k in range(10, 27, 2)]
    times = [collective_time_s("all_reduce", s, 4, truth) for s in sizes]
    cal = fit_alpha_beta(sizes, times, 4)
    assert cal.link.latency_us == pytest.approx(45.0, rel=1e-6)
    assert cal.link.bandwidth_GBps == pytest.approx(1.7, rel=1e-6)
    assert cal.median_error < 1e-9
    assert "median residual 0%" in str(cal)


def test_fit_with_noise_and_degenerate_data() -> None:
    truth = Link("truth", bandwidth_GBps=3.0, latency_us=200.0)
    sizes = [2**k for k in range(10, 27, 2)]
    noise = [1.1, 0.9, 1.05, 0.95, 1.1, 0.9, 1.0, 1.05, 0.95]
    times = [collective_time_s("all_reduce", s, 2, truth) * f
             for s, f in zip(sizes, noise, strict=True)]
    cal = fit_alpha_beta(sizes, times, 2)
    assert cal.median_error < 0.1
    flat = fit_alpha_beta([1024, 2048, 4096], [1e-3, 1e-3, 1e-3], 2)  # latency only
    assert flat.link.latency_us == pytest.approx(1000.0 / 2, rel=0.05)
    linear = fit_alpha_beta([2**20, 2**22], [1e-3, 4e-3], 2)  # bandwidth only
    assert linear.link.latency_us >= 0
    assert linear.median_error < 0.05


def test_fit_bad_input() -> None:
    with pytest.raises(ValueError, match=r"^sizes_bytes=\[1024\] has 1 sizes"):
        fit_alpha_beta([1024], [1e-3, 2e-3], 4)
    with pytest.raises(ValueError, match="same number"):
        fit_alpha_beta([1024, 2048], [1e-3], 4)
    with pytest.raises(ValueError, match=r"^times_s\[0\]=0.0 is out of range"):
        fit_alpha_beta([1024, 2048], [0.0, 1e-3], 4)
    with pytest.raises(ValueError, match="world_size"):
        fit_alpha_beta([1024, 2048], [1e-3, 2e-3], 1)


@pytest.mark.slow
def test_calibrate_times_real_ranks_and_fits() -> None:
    from dpsim.runtime.link_calibration import calibrate

    cal = calibrate(world_size=2, sizes_bytes=(4096, 1 << 20), repeats=1, backend="gloo")
    assert cal.world_size == 2
    assert cal.sizes_bytes == (4096, 1 << 20)
    assert all(t > 0 for t in cal.measured_s)
    assert cal.link.bandwidth_GBps > 0
    assert cal.link.latency_us >= 0
    assert "this machine" in cal.link.name
    with pytest.raises(ValueError, match="impl"):
        calibrate(impl="nccl-magic")
