"""DDP simulated (dpsim.sim.strategies.ddp): buckets, overlap, breakdown; figures and explorer."""

from __future__ import annotations

import dataclasses

import plotly.graph_objects as go
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsim.sim as sim
from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.cost.memory import model_state_bytes
from dpsim.sim.hardware import A100_80GB, Cluster, Link, get_cluster
from dpsim.sim.strategies import single
from dpsim.sim.strategies.ddp import (
    DDPConfig,
    GradTensor,
    MiB,
    buckets_of,
    build_buckets,
    copy_time_s,
    grad_tensors,
    scaling,
    simulate,
    step_result,
)
from dpsim.sim.trace import Event, Trace
from dpsim.sim.workload import DTYPE_BYTES, Layer, Workload, get_workload

SLOW = Link("slow test link", bandwidth_GBps=1.0, latency_us=50.0)


def _workload(n_layers: int = 6, params: int = 400_000) -> Workload:
    layers = tuple(Layer(f"l{i}", "Linear", params, 2, 4096, 4096, 2.0 * params)
                   for i in range(n_layers))
    return Workload("toy", layers)


def _cluster(n: int, link: Link = SLOW) -> Cluster:
    return Cluster("toy", A100_80GB, n, 1, link)


# --- buckets -------------------------------------------------------------------------------
def test_buckets_walk_parameters_in_reverse_and_cap_the_first_at_1_mib() -> None:
    tensors = [GradTensor(f"p{i}", nbytes, i) for i, nbytes in
               enumerate([3 * MiB, 10, 2 * MiB, 400_000, 700_000])]
    buckets = build_buckets(tensors, bucket_cap_mb=4.0, first_bucket_cap_mb=1.0)
    # reverse order: p4 (0.67 MiB) + p3 (0.38 MiB) crosses 1 MiB -> bucket 0 closes
    assert [b.params for b in buckets] == [("p4", "p3"), ("p2", "p1", "p0")]
    assert [b.nbytes for b in buckets] == [1_100_000, 5 * MiB + 10]
    assert [b.cap_bytes for b in buckets] == [MiB, 4 * MiB]
    assert [b.ready_layer for b in buckets] == [3, 0]


def test_a_tensor_larger_than_the_cap_gets_a_bucket_of_its_own() -> None:
    tensors = [GradTensor("small", 100, 0), GradTensor("huge", 50 * MiB, 1)]
    buckets = build_buckets(tensors, bucket_cap_mb=25.0, first_bucket_cap_mb=1.0)
    assert [b.params for b in buckets] == [("huge",), ("small",)]


def test_ready_order_replaces_the_reverse_parameter_guess() -> None:
    tensors = [GradTensor("w", 600_000, 0), GradTensor("b", 600_000, 0),
               GradTensor("w2", 600_000, 1)]
    guessed = build_buckets(tensors, 25.0, 1.0)
    real = build_buckets(tensors, 25.0, 1.0, ready_order=["w2", "w", "b"])
    assert [b.params for b in guessed] == [("w2", "b"), ("w",)]
    assert [b.params for b in real] == [("w2", "w"), ("b",)]
    with pytest.raises(ValueError, match="ready_order"):
        build_buckets(tensors, ready_order=["w2", "w"])


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=30),
       first=st.integers(1, 20_000), cap=st.integers(1, 40_000))
def test_buckets_equal_the_ones_torch_computes(sizes: list[int], first: int, cap: int) -> None:
    """DDP's rebuild walks gradients in ready order with limits [first, cap]."""
    tensors = [torch.empty(n) for n in sizes]  # float32: 4 bytes per element
    ready = list(range(len(sizes)))[::-1]
    torch_buckets, _ = dist._compute_bucket_assignment_by_size(
        [tensors[i] for i in ready], [4 * first, 4 * cap], [False] * len(sizes), ready)
    ours = build_buckets([GradTensor(str(i), 4 * n, i) for i, n in enumerate(sizes)],
                         bucket_cap_mb=4 * cap / MiB, first_bucket_cap_mb=4 * first / MiB)
    assert [[int(p) for p in b.params] for b in ours] == [list(b) for b in torch_buckets]


def test_grad_tensors_map_parameter_names_to_layers() -> None:
    w = Workload("m", (Layer("0", "Linear", 10, 2, 0, 0, 0.0), Layer("1", "ReLU", 0, 0, 0, 0, 0.0),
                       Layer("2", "Linear", 6, 2, 0, 0, 0.0)))
    names = [("0.weight", 32), ("0.bias", 8), ("2.weight", 16), ("2.bias", 8)]
    assert [t.layer for t in grad_tensors(w, names=names)] == [0, 0, 2, 2]
    assert [(t.name, t.nbytes, t.layer) for t in grad_tensors(w, "bf16")] == [
        ("0", 20, 0), ("2", 12, 2)]


# --- the timeline --------------------------------------------------------------------------
def test_one_rank_is_a_single_device_plus_ddp_bookkeeping_and_free_communication() -> None:
    w = get_workload("gpt2-124m")
    device = get_cluster("h100-node").device
    one = single.step_result(single.simulate(w, device, single.SingleConfig(batch_size=4))).step_s
    hooks = w.n_param_tensors * device.op_overhead_us * 1e-6
    view = simulate(w, get_cluster("h100-node").with_devices(1),
                    DDPConfig(batch_size=4, gradient_as_bucket_view=True))
    assert step_result(view).step_s == pytest.approx(one + hooks, rel=1e-12)
    assert all(e.duration_s == 0 for e in view.filter(stream="comm"))
    copy = simulate(w, get_cluster("h100-node").with_devices(1), DDPConfig(batch_size=4))
    grad_bytes = 4 * w.n_params  # fp32 gradients, copied into the buckets and back
    assert step_result(copy).step_s == pytest.approx(
        one + hooks + 2 * copy_time_s(grad_bytes, device), rel=1e-12)
    assert copy_time_s(grad_bytes, device) == 2 * grad_bytes / (device.mem_bw_GBps * 1e9)


def test_each_bucket_costs_a_ring_all_reduce_and_starts_when_it_is_ready() -> None:
    w, n = _workload(), 4
    trace = simulate(w, _cluster(n), DDPConfig(batch_size=8, bucket_cap_mb=3.0))
    comm = trace.filter(stream="comm")
    buckets = buckets_of(trace)
    assert len(comm) == len(buckets) > 2
    ready = {e.label: e.end_s for e in trace.filter(kind="backward")}
    free = 0.0
    for event, bucket in zip(comm, buckets, strict=True):
        assert event.nbytes == bucket.nbytes
        assert event.duration_s == pytest.approx(
            collective_time_s("all_reduce", bucket.nbytes, n, SLOW), rel=1e-12)
        last_layer = min(int(p[1:]) for p in bucket.params)
        assert bucket.ready_layer == last_layer
        assert event.start_s == pytest.approx(max(ready[f"l{last_layer}"], free))
        free = event.end_s
    copy = trace.filter(kind="copy")[0]  # buckets back into p.grad, then the optimizer
    assert copy.start_s == pytest.approx(max(free, max(ready.values())))
    assert trace.filter(kind="optimizer")[0].start_s == pytest.approx(copy.end_s)


def test_without_overlap_every_all_reduce_waits_for_backward() -> None:
    w = _workload()
    on = simulate(w, _cluster(4), DDPConfig(batch_size=8, bucket_cap_mb=3.0))
    off = simulate(w, _cluster(4), DDPConfig(batch_size=8, bucket_cap_mb=3.0, overlap=False))
    backward_end = max(e.end_s for e in off.filter(kind="backward"))
    assert min(e.start_s for e in off.filter(stream="comm")) == pytest.approx(backward_end)
    b_on, b_off = step_result(on), step_result(off)
    assert b_off.hidden_comm_s == pytest.approx(0.0, abs=1e-15)
    assert b_off.step_s == pytest.approx(b_off.compute_s + b_off.comm_s)
    assert b_on.hidden_comm_s > 0
    assert b_on.step_s < b_off.step_s


def test_step_result_adds_up() -> None:
    trace = simulate(_workload(), _cluster(8), DDPConfig(batch_size=8, bucket_cap_mb=2.0))
    b = step_result(trace)
    assert b.step_s == pytest.approx(b.compute_s + b.exposed_comm_s)
    assert b.comm_s == pytest.approx(trace.busy_s(0, "comm"))
    assert b.n_devices == 8
    assert b.batch_per_device == 8
    assert b.other_s == 0.0
    assert 0 < b.overlap_fraction < 1
    assert b.scaling_efficiency == pytest.approx(b.compute_s / b.step_s)


def test_step_result_of_a_hand_made_trace() -> None:
    trace = Trace("measured", events=[
        Event(0, "compute", "backward", 0.0, 4.0), Event(0, "comm", "all_reduce", 3.0, 6.0),
        Event(0, "compute", "optimizer", 6.0, 7.0)])
    b = step_result(trace)
    assert (b.step_s, b.compute_s, b.comm_s, b.hidden_comm_s, b.exposed_comm_s) == (
        7.0, 5.0, 3.0, 1.0, 2.0)
    with pytest.raises(ValueError, match="device=3"):  # checked at the face
        sim.step_result(trace, device=3)


def test_scaling_efficiency_falls_with_world_size_over_a_slow_link() -> None:
    points = scaling(_workload(), _cluster(1), DDPConfig(batch_size=8), (1, 2, 8, 64))
    eff = [p.breakdown.scaling_efficiency for p in points]
    assert eff[0] == pytest.approx(1.0)
    assert eff == sorted(eff, reverse=True)
    assert eff[-1] < 0.9
    assert points[2].samples_per_s > points[1].samples_per_s


def test_bigger_buckets_mean_fewer_all_reduces() -> None:
    w = get_workload("gpt2-124m")
    counts = [len(buckets_of(simulate(w, get_cluster("h100-node"), DDPConfig(bucket_cap_mb=cap))))
              for cap in (10.0, 60.0, 200.0)]
    assert counts[0] > counts[1] > counts[2] >= 1


def test_simulation_is_deterministic() -> None:
    a = simulate(_workload(), _cluster(4), DDPConfig(bucket_cap_mb=2.0))
    b = simulate(_workload(), _cluster(4), DDPConfig(bucket_cap_mb=2.0))
    assert a.to_dict() == b.to_dict()


@pytest.mark.parametrize(("dtype", "mixed"), [("fp32", False), ("bf16", True), ("bf16", False)])
def test_peak_is_model_states_plus_the_bucket_copy_plus_activations(dtype: str,
                                                                     mixed: bool) -> None:
    w, n = get_workload("gpt2-124m"), 4
    r = step_result(simulate(w, get_cluster("h100-node").with_devices(n),
                             DDPConfig(batch_size=2, dtype=dtype, mixed_precision=mixed)))
    states = model_state_bytes(w.n_params, w.n_param_tensors, dtype=dtype,
                               mixed_precision=mixed)
    grads = w.n_params * DTYPE_BYTES[dtype]
    assert r.peak_bytes == (states.model_states + grads + w.activation_bytes(2, dtype),) * n
    assert r.sent_bytes_per_device == int(2 * (n - 1) / n * grads)


def test_bucket_view_removes_the_bucket_copy_from_memory() -> None:
    w = _workload()
    copy = simulate(w, _cluster(2), DDPConfig()).memory_at_peak(0)
    view = simulate(w, _cluster(2), DDPConfig(gradient_as_bucket_view=True)).memory_at_peak(0)
    assert copy["buckets"] == copy["gradients"] == 4 * w.n_params
    assert view["buckets"] == 0


@pytest.mark.parametrize(("field", "value"), [
    ("batch_size", 0), ("bucket_cap_mb", 0.0), ("first_bucket_cap_mb", -1.0),
    ("optimizer", "lion"), ("dtype", "fp8"), ("algorithm", "butterfly"), ("overlap", "yes"),
    ("gradient_as_bucket_view", 1), ("mixed_precision", "yes"), ("mixed_precision", True),
])
def test_config_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        DDPConfig(**{field: value})  # type: ignore[arg-type]
    assert dataclasses.is_dataclass(DDPConfig)


# --- figures and explorer ------------------------------------------------------------------
def test_figures_are_built_from_results() -> None:
    from dpsim.viz.ddp_timeline import breakdown_bars, bucket_sizes, scaling_figure
    from dpsim.viz.timeline import timeline

    trace = simulate(_workload(), _cluster(4), DDPConfig(bucket_cap_mb=2.0))
    measured = Trace("measured", events=[Event(0, "compute", "forward", 0.0, 0.001),
                                         Event(0, "comm", "all_reduce", 0.001, 0.002, 64, "b0")])
    fig = timeline([trace, measured], devices=[0], streams=("compute", "comm"), lanes=True,
                   step_time=True)
    rows = {y for d in fig.data for y in d.y}
    assert rows == {"simulated · compute", "simulated · comm", "measured · compute",
                    "measured · comm"}
    assert isinstance(breakdown_bars({"a": step_result(trace)}), go.Figure)
    points = scaling(_workload(), _cluster(1), DDPConfig(), (1, 2))
    assert len(scaling_figure(points).data) == 4
    buckets = build_buckets(grad_tensors(_workload()), 2.0)
    assert list(bucket_sizes(buckets).data[0].y) == [b.nbytes / 1024 for b in buckets]


def test_explorer_reports_what_it_simulated() -> None:
    from dpsim.widgets.ddp_explorer import LINKS, ddp_explorer, explore

    timeline_fig, scaling_fig, text = explore("gpt2-124m", "h100-80gb", "PCIe 4.0 x16", 4,
                                              25.0, 8, True)
    assert isinstance(timeline_fig, go.Figure)
    assert isinstance(scaling_fig, go.Figure)
    assert text.startswith("simulated, N=4")
    assert "scaling efficiency" in text
    assert set(LINKS) >= {"PCIe 4.0 x16", "NVLink 4 (H100)"}
    assert ddp_explorer() is not None
