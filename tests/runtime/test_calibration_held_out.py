"""Calibration math: the held-out error of the alpha-beta fit, the step-speed scale."""

from __future__ import annotations

import pytest

from dpsim.runtime.link_calibration import fit_alpha_beta, held_out_error
from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.hardware import Link

SIZES = [1024, 64 * 1024, 1 << 20, 16 << 20]


def _times(link: Link, sizes: list[int], world_size: int = 4) -> list[float]:
    return [collective_time_s("all_reduce", s, world_size, link) for s in sizes]


def test_exact_times_give_zero_held_out_error() -> None:
    times = _times(Link("truth", bandwidth_GBps=2.0, latency_us=80.0), SIZES)
    held = held_out_error(SIZES, times, 4)
    assert held.fitted_sizes == (SIZES[0], SIZES[2])
    assert held.held_out_sizes == (SIZES[1], SIZES[3])
    assert held.median < 1e-9
    assert held.worst < 1e-9


def test_held_out_error_exceeds_residual_when_one_point_is_off() -> None:
    times = _times(Link("truth", bandwidth_GBps=2.0, latency_us=80.0), SIZES)
    times[1] *= 1.5  # a held-out size the fit never sees
    held = held_out_error(list(reversed(SIZES)), list(reversed(times)), 4)  # order is free
    assert held.held_out_sizes == (SIZES[1], SIZES[3])
    assert held.errors[0] == pytest.approx(1 - 1 / 1.5, rel=1e-6)
    assert held.errors[1] < 1e-9
    assert held.worst == pytest.approx(held.errors[0])
    # the fit on all four sizes spreads the bad point: its residual understates the error
    assert fit_alpha_beta(SIZES, times, 4).errors[1] < held.errors[0]


def test_held_out_bad_input() -> None:
    with pytest.raises(ValueError, match=r"^sizes_bytes=\[1024, 2048, 4096\] is not a list"):
        held_out_error([1024, 2048, 4096], [1e-3, 2e-3, 3e-3], 4)
    with pytest.raises(ValueError, match=r"^measured_s="):
        held_out_error(SIZES, [1e-3, 2e-3], 4)
    with pytest.raises(ValueError, match="world_size"):
        held_out_error(SIZES, [1e-3, 2e-3, 3e-3, 4e-3], 1)


def test_step_scale_math() -> None:
    from dpsim.runtime.device_calibration import step_scale

    assert step_scale(measured_s=3e-3, overhead_s=1e-3, roofline_s=1e-3) == pytest.approx(0.5)
    assert step_scale(measured_s=1.5e-3, overhead_s=1e-3, roofline_s=1e-3) == pytest.approx(2.0)
    assert step_scale(measured_s=1e-3, overhead_s=2e-3, roofline_s=1e-3) == 100.0  # clamped
    assert step_scale(measured_s=1e-3, overhead_s=0.0, roofline_s=0.0) == 1.0
    with pytest.raises(ValueError, match="measured_s"):
        step_scale(measured_s=-1.0, overhead_s=0.0, roofline_s=1e-3)


def test_op_overhead_calibration_restores_the_thread_count() -> None:
    import torch

    from dpsim.runtime.device_calibration import measure_op_overhead_us

    threads = torch.get_num_threads()
    assert measure_op_overhead_us(torch.device("cpu"), depth=2, repeats=6) > 0
    assert torch.get_num_threads() == threads


def test_step_costs_recovers_overhead_factor_and_speed_scale() -> None:
    from dpsim.runtime.device_calibration import step_costs

    overhead, roofline = (1e-3, 2e-3), (1e-4, 8e-3)
    measured = tuple(2.0 * o + r / 4.0 for o, r in zip(overhead, roofline, strict=True))
    factor, scale = step_costs((measured[0], measured[1]), overhead, roofline)
    assert factor == pytest.approx(2.0)
    assert scale == pytest.approx(4.0)
    # steps the two costs cannot tell apart: factor 1, the scale from the large step
    assert step_costs((1e-3, 2e-3), (1e-3, 2e-3), (1e-3, 2e-3)) == (1.0, 100.0)
    with pytest.raises(ValueError, match="overhead_s"):
        step_costs((1e-3, 2e-3), (1e-3,), (1e-3, 2e-3))  # type: ignore[arg-type]
