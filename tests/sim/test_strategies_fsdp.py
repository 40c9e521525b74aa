"""The FSDP / ZeRO step simulator against its closed forms (dpsim.sim.strategies.fsdp)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import dpsim.sim as sim
from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.collectives.nccl import nccl_time_s
from dpsim.sim.cost.memory import zero_bytes_per_device
from dpsim.sim.hardware import (
    H100_80GB,
    INFINIBAND_NDR,
    NVLINK4,
    PCIE4_X16,
    Cluster,
    Link,
    get_cluster,
)
from dpsim.sim.strategies.fsdp import (
    FSDPConfig,
    build_units,
    communication_bytes_per_step,
    compare_stages,
    simulate,
    step_result,
    summary,
)
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Layer, Workload, get_workload, transformer
from tests.support.links import ring_link_of

NODE = Cluster("8 GPUs", H100_80GB, 8, 1, NVLINK4)
SLOW = Cluster("8 GPUs over PCIe", H100_80GB, 8, 1, PCIE4_X16)


def uniform(n_layers: int = 6, n_params: int = 8 * 1_000_000) -> Workload:
    """Identical layers whose sizes divide by 8 (no padding)."""
    layer = Layer("blk", "Block", n_params, 2, 4_000_000, 1_000_000, 2e10)
    layers = tuple(replace(layer, name=f"blk{i}") for i in range(n_layers))
    return Workload("uniform", layers, dtype="bf16", input_bytes=1_000_000, loss_bytes=0)


def series(trace: Trace, category: str) -> list[int]:
    return [d.get(category, 0) for _, d in trace.memory_timeline(0)]


@pytest.mark.parametrize(("stage", "reshard", "multiple"),
                         [(3, True, 3), (3, False, 2), (2, True, 2), (1, True, 2), (0, True, 2)])
def test_communication_volume_matches_formula(stage: int, reshard: bool, multiple: int) -> None:
    w = get_workload("gpt2-124m")
    tr = simulate(w, NODE, FSDPConfig(stage=stage, reshard_after_forward=reshard))
    expected = communication_bytes_per_step(w.n_params, 8, stage, 2, reshard)
    facts = summary(tr)
    assert facts.comm_volume_bytes == expected == multiple * w.n_params * 2
    assert facts.comm_to_model == pytest.approx(multiple)
    assert step_result(tr).sent_bytes_per_device == int(expected * 7 / 8)


def test_every_collective_takes_its_group_cost() -> None:
    """GPU links: NCCL's model of the collective over the 8 ranks; a generic link: the
    textbook ring on the achieved link (chapters 1-5's closed form, unchanged)."""
    tr = simulate(get_workload("gpt2-124m"), SLOW, FSDPConfig())
    comm = tr.filter(stream="comm")
    assert {e.kind for e in comm} == {"all_gather", "reduce_scatter"}
    for e in comm:
        assert e.duration_s == pytest.approx(nccl_time_s(e.kind, e.nbytes, SLOW), rel=1e-12)
    generic = Cluster("8 CPUs", H100_80GB, 8, 1, Link("calibrated", 5.0, 30.0))
    for e in simulate(get_workload("gpt2-124m"), generic, FSDPConfig()).filter(stream="comm"):
        assert e.duration_s == pytest.approx(collective_time_s(e.kind, e.nbytes, 8,
                                                             ring_link_of(generic, 8)), rel=1e-12)


def test_stage3_order_gather_compute_reduce_scatter() -> None:
    w = uniform()
    tr = simulate(w, SLOW, FSDPConfig())
    gathers = tr.filter(kind="all_gather")
    assert len(gathers) == 2 * 6 - 1  # forward + backward, the last unit stays gathered
    for e in tr.filter(kind="forward"):
        first = min(g.end_s for g in gathers if g.label == e.label)
        assert e.start_s >= first - 1e-12
    backward = {e.label: e for e in tr.filter(kind="backward")}
    for rs in tr.filter(kind="reduce_scatter"):
        assert rs.start_s >= backward[rs.label].end_s - 1e-12
    for label, bwd in backward.items():
        if label != "blk5":
            bwd_gather = max((g for g in gathers if g.label == label), key=lambda g: g.end_s)
            assert bwd.start_s >= bwd_gather.end_s - 1e-12
    opt = tr.filter(kind="optimizer")[0]
    assert opt.start_s >= max(e.end_s for e in tr.filter(stream="comm")) - 1e-12


def test_model_states_per_device_match_zero_formula() -> None:
    w = uniform()
    for stage in range(4):
        tr = simulate(w, NODE, FSDPConfig(stage=stage, optimizer="sgd"))
        first = tr.memory_timeline(0)[0][1]
        z = zero_bytes_per_device(w.n_params, 8, stage, optimizer_bytes=4)  # fp32 master only
        assert first["parameters"] == z.parameters
        assert first["optimizer"] == z.optimizer
        assert max(series(tr, "gradients")) >= z.gradients


def test_gathered_parameters_unit_by_unit() -> None:
    w = uniform()
    unit_bytes = w.layers[0].n_params * 2
    on = simulate(w, SLOW, FSDPConfig())
    off = simulate(w, SLOW, FSDPConfig(forward_prefetch=False, backward_prefetch=False))
    keep = simulate(w, SLOW, FSDPConfig(reshard_after_forward=False))
    assert max(series(on, "gathered")) == 2 * unit_bytes  # the current unit and the next one
    assert max(series(off, "gathered")) == unit_bytes
    assert max(series(keep, "gathered")) == 6 * unit_bytes  # everything until backward
    for tr in (on, off, keep):
        assert series(tr, "gathered")[-1] == 0
        assert series(tr, "activations")[-1] == 0


def test_prefetch_hides_communication() -> None:
    w = get_workload("gpt2-124m")
    on = simulate(w, SLOW, FSDPConfig(batch_size=2))
    off = simulate(w, SLOW, FSDPConfig(batch_size=2, forward_prefetch=False,
                                       backward_prefetch=False))
    t, t_off = step_result(on), step_result(off)
    assert t.step_s < t_off.step_s
    assert t.exposed_comm_s < t_off.exposed_comm_s
    assert t.hidden_comm_s + t.exposed_comm_s == pytest.approx(on.busy_s(0, "comm"))
    assert t.step_s == pytest.approx(t.compute_s + t.exposed_comm_s)


def test_stages_lower_memory_in_order() -> None:
    traces = compare_stages(get_workload("gpt-1.3b"), NODE, FSDPConfig(batch_size=1))
    peaks = [step_result(t).peak_bytes[0] for t in traces.values()]
    assert peaks[0] > peaks[1] >= peaks[2] > peaks[3]
    assert list(traces) == ["ZeRO-0 (DDP)", "ZeRO-1", "ZeRO-2", "ZeRO-3 (FSDP)"]


def test_checkpointing_trades_memory_for_time() -> None:
    w = get_workload("gpt2-124m")
    plain = simulate(w, NODE, FSDPConfig(batch_size=8))
    ckpt = simulate(w, NODE, FSDPConfig(batch_size=8, activation_checkpointing=True))
    assert step_result(ckpt).peak_bytes[0] < step_result(plain).peak_bytes[0]
    assert step_result(ckpt).compute_s > step_result(plain).compute_s


def test_one_device_has_no_communication() -> None:
    one = Cluster("1 GPU", H100_80GB, 1, 1, NVLINK4)
    tr = simulate(get_workload("gpt2-124m"), one, FSDPConfig())
    assert tr.filter(stream="comm") == []
    assert summary(tr).comm_volume_bytes == 0
    assert step_result(tr).step_s == pytest.approx(step_result(tr).compute_s)


def test_deterministic_and_one_representative_device() -> None:
    w, c = get_workload("gpt2-124m"), get_cluster("h100-ib-4")
    a, b = simulate(w, c, FSDPConfig()), simulate(w, c, FSDPConfig())
    assert a.to_dict() == b.to_dict()
    assert a.devices == [0]
    assert summary(a).devices_identical
    assert step_result(a).n_devices == 32


def test_units_group_layers() -> None:
    w = uniform(6)
    units = build_units(w, NODE, FSDPConfig(layers_per_unit=4))
    assert [u.n_params for u in units] == [4 * 8_000_000, 2 * 8_000_000]


def test_simulates_1024_devices_and_96_layers() -> None:
    """The chapter-7 scale runs (its speed goal, 50 ms, is measured in benchmarks/planner.py)."""
    w = transformer("96 layers", 96, 12288, 96, 2048, 50257)
    big = Cluster("1024 GPUs", H100_80GB, 8, 128, NVLINK4, INFINIBAND_NDR)
    result = step_result(simulate(w, big, FSDPConfig()))
    assert result.n_devices == 1024
    assert len(set(result.peak_bytes)) == 1  # ZeRO-3 shards evenly: every device alike
    assert result.step_s >= result.compute_s > 0


@pytest.mark.parametrize("bad", [{"stage": 4}, {"precision": "fp8"}, {"batch_size": 0},
                                 {"layers_per_unit": 0}, {"optimizer": "lion"},
                                 {"reshard_after_forward": "yes"}, {"algorithm": "star"}])
def test_bad_config_is_a_clear_error(bad: dict[str, object]) -> None:
    field = next(iter(bad))
    with pytest.raises(ValueError, match=field):
        FSDPConfig(**bad)  # type: ignore[arg-type]


def test_negative_model_size_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="n_params"):
        sim.communication_bytes_per_step(-1, 8, 3)
