"""The DDP recorder's post-processing: a step's timestamps -> events (no process started)."""

from __future__ import annotations

import pytest

from dpsim.labs.ch05_ddp.ddp_recorder import DDPRecording, RankRecording, step_events
from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig

LAYER_OF = {"0.weight": "0", "0.bias": "0", "2.weight": "2", "2.bias": "2"}


def test_backward_is_split_where_each_layer_s_last_gradient_was_ready() -> None:
    t0 = 100.0
    ready = {"2.bias": 100.004, "2.weight": 100.005, "0.bias": 100.007, "0.weight": 100.008}
    comm = {0: (100.0055, 100.009)}
    events = step_events(1, t0, (100.003, 100.008, 100.010), ready, comm, {0: 4096}, LAYER_OF)
    spans = [(e.kind, e.label, round(e.start_s * 1e3, 3), round(e.end_s * 1e3, 3))
             for e in events]
    assert spans == [("forward", "forward", 0.0, 3.0), ("backward", "2", 3.0, 5.0),
                     ("backward", "0", 5.0, 8.0), ("optimizer", "optimizer", 8.0, 10.0),
                     ("all_reduce", "bucket 0", 5.5, 9.0)]
    assert all(e.device == 1 for e in events)
    assert events[-1].nbytes == 4096
    assert events[-1].stream == "comm"


def test_an_all_reduce_not_seen_ending_ends_where_it_started() -> None:
    events = step_events(0, 0.0, (1.0, 2.0, 3.0), {}, {3: (1.5, 0.0)}, {3: 8}, {})
    assert [(e.start_s, e.end_s) for e in events if e.stream == "comm"] == [(1.5, 1.5)]


@pytest.mark.parametrize(("cores", "threads", "overlaps"), [(2, 1, False), (4, 1, True)])
def test_the_prediction_overlaps_only_with_a_spare_core_per_rank(cores: int, threads: int,
                                                                 overlaps: bool) -> None:
    ranks = [RankRecording(r, [0.01], [], [], (25.0, 1.0), threads=threads, cores=cores)
             for r in range(2)]
    from dpsim.sim.hardware import cpu_device

    assert DDPRecording(DDPRunConfig(), ranks).overlaps(cpu_device(1)) is overlaps


def _recording(cores: int) -> DDPRecording:
    cfg = DDPRunConfig(hidden=64, depth=2, batch_size=8, progress=False)
    return DDPRecording(cfg, [RankRecording(r, [0.01], [], [], (0.01, 0.01), threads=1,
                                            cores=cores) for r in range(2)])


def test_without_a_spare_core_the_all_reduces_wait_for_backward_and_host_work_is_added(
        ) -> None:
    from dpsim.sim.hardware import Link, cpu_device
    from dpsim.sim.strategies.ddp import step_result

    device, link = cpu_device(1), Link("loopback", 1.0, 100.0)
    busy = _recording(cores=2).predict(device, link, step_overhead_s=0.0)
    backward_end = max(e.end_s for e in busy.filter(kind="backward"))
    assert all(e.start_s >= backward_end for e in busy.filter(kind="all_reduce"))
    spare = _recording(cores=4).predict(device, link, step_overhead_s=0.0)
    assert step_result(spare).step_s < step_result(busy).step_s
    with_host = _recording(cores=2).predict(device, link, step_overhead_s=1e-3)
    assert step_result(with_host).step_s == pytest.approx(step_result(busy).step_s + 1e-3)


def test_a_scaled_device_scales_every_compute_time() -> None:
    from dpsim.runtime.device_calibration import scaled_device
    from dpsim.sim.cost.compute import step_compute_s
    from dpsim.sim.hardware import cpu_device
    from dpsim.sim.workload import get_workload

    workload, device = get_workload("gpt2-124m"), cpu_device(1)
    base = step_compute_s(workload, 2, device)
    assert step_compute_s(workload, 2, scaled_device(device, 2.5)) == pytest.approx(2.5 * base)
    with pytest.raises(ValueError, match="factor"):
        scaled_device(device, 0.0)
