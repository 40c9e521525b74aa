"""DataParallel simulated (dpsim.sim.strategies.dp): scatter semantics, timeline, memory;
figures."""

from __future__ import annotations

import dataclasses
import itertools

import plotly.graph_objects as go
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import dpsim.sim as sim
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.models import mlp
from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.collectives.group_cost import achieved_link
from dpsim.sim.collectives.nccl import nccl_time_s
from dpsim.sim.hardware import NVLINK4, PCIE4_X16, Cluster, get_cluster
from dpsim.sim.strategies.dp import (
    PHASES,
    DPConfig,
    bytes_at_loss,
    device0_extra_bytes,
    device_batch_sizes,
    scatter_sizes,
    simulate,
    step_result,
    summary,
    with_output_features,
)
from dpsim.sim.workload import Workload, get_workload
from dpsim.viz.memory_per_device import bytes_at, memory_per_device, peak_per_device
from dpsim.viz.scatter_gather import phase_steps, scatter_gather
from dpsim.widgets.dp_explorer import describe, dp_explorer, explore, render

NODE = get_cluster("h100-node")


@pytest.fixture(scope="module")
def classifier() -> Workload:
    return workload_from_module(mlp(32, 64, 2, 10), torch.randn(4, 32))


# --- scatter semantics: what torch does ---------------------------------------------------


@pytest.mark.parametrize(("batch", "n", "sizes"), [
    (10, 4, [3, 3, 3, 1]), (2, 4, [1, 1]), (5, 4, [2, 2, 1]), (6, 4, [2, 2, 2]),
    (128, 4, [32] * 4), (1, 8, [1]), (7, 1, [7]),
])
def test_scatter_sizes_known_cases(batch: int, n: int, sizes: list[int]) -> None:
    assert scatter_sizes(batch, n) == sizes
    assert device_batch_sizes(batch, n) == sizes + [0] * (n - len(sizes))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.integers(1, 16))
def test_scatter_sizes_equal_torch_chunk(batch: int, n: int) -> None:
    assert scatter_sizes(batch, n) == [c.shape[0] for c in torch.arange(batch).chunk(n)]


@pytest.mark.parametrize(("batch", "n"), [(10, 4), (2, 4), (5, 4), (9, 3)])
def test_dataparallel_python_scatter_uses_that_many_devices(
        monkeypatch: pytest.MonkeyPatch, batch: int, n: int) -> None:
    """torch's own scatter_kwargs (what DataParallel.forward calls), with the C++ copy
    (torch/csrc/cuda/comm.cpp: `tensor.chunk(devices.size(), dim)`) done on the CPU."""
    import torch.nn.parallel.comm as comm
    from torch.nn.parallel.scatter_gather import scatter_kwargs

    def cpu_scatter(tensor: torch.Tensor, devices: list[int], chunk_sizes: object, dim: int,
                    streams: object) -> tuple[torch.Tensor, ...]:
        assert chunk_sizes is None
        return tensor.chunk(len(devices), dim)

    monkeypatch.setattr(comm, "scatter", cpu_scatter)
    x = torch.arange(batch * 3.0).reshape(batch, 3)
    inputs, _kwargs = scatter_kwargs((x,), {}, list(range(n)))
    assert [t[0].shape[0] for t in inputs] == scatter_sizes(batch, n)
    assert len(inputs) == len(scatter_sizes(batch, n))  # DataParallel replicates this many
    assert torch.equal(torch.cat([t[0] for t in inputs]), x)


def test_dataparallel_on_cpu_just_calls_the_module() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the claim is about CPU-only machines")
    model = mlp(8, 16, 1, 4)
    dp = nn.DataParallel(model)
    x = torch.randn(5, 8)
    assert dp.device_ids == []
    assert torch.equal(dp(x), model(x))


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"n_devices": 0}, "n_devices"), ({"batch_size": 0}, "batch_size"),
    ({"optimizer": "lion"}, "optimizer"), ({"input_on": "disk"}, "input_on"),
    ({"op_gil_share": 1.5}, "op_gil_share"), ({"python_op_us": -1.0}, "python_op_us"),
])
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DPConfig(**kwargs)  # type: ignore[arg-type]


def test_more_devices_than_the_node_has(classifier: Workload) -> None:
    """Checked at the face (`dpsim.sim`); inside, the config is trusted to fit."""
    with pytest.raises(ValueError, match="n_devices"):
        sim.simulate(classifier, NODE, DPConfig(n_devices=9))
    with pytest.raises(ValueError, match="batch_size"):
        sim.scatter_sizes(0, 4)
    with pytest.raises(ValueError, match="n_devices"):
        sim.scatter_sizes(8, 0)
    with pytest.raises(ValueError, match="n_devices"):
        device0_extra_bytes(classifier, DPConfig(n_devices=1))


# --- the timeline ---------------------------------------------------------------------------


def test_deterministic(classifier: Workload) -> None:
    cfg = DPConfig(n_devices=4, batch_size=10)
    assert simulate(classifier, NODE, cfg).to_dict() == simulate(classifier, NODE, cfg).to_dict()


def test_phases_in_order_and_only_used_devices(classifier: Workload) -> None:
    trace = simulate(classifier, NODE, DPConfig(n_devices=4, batch_size=2))
    phases = summary(trace).phases
    assert list(phases) == [p for p in PHASES if p in phases]
    assert set(phases) == set(PHASES)
    starts = [phases[p][0] for p in ("replicate", "forward", "loss", "reduce", "optimizer")]
    assert starts == sorted(starts)
    assert summary(trace).chunk_sizes == (1, 1)
    assert {e.device for e in trace.events} == {0, 1}  # devices 2 and 3 idle
    assert trace.peak_memory(2) == trace.peak_memory(3) == 0


def test_one_device_in_use_has_no_replicate_or_gather(classifier: Workload) -> None:
    for cfg in (DPConfig(n_devices=1, batch_size=8), DPConfig(n_devices=4, batch_size=1)):
        kinds = {e.kind for e in simulate(classifier, NODE, cfg).events}
        assert not kinds & {"replicate", "gather", "reduce"}
        assert {"forward", "loss", "backward", "optimizer"} <= kinds


def test_one_thread_holds_the_gil_at_a_time(classifier: Workload) -> None:
    trace = simulate(classifier, NODE, DPConfig(n_devices=8, batch_size=64))
    held = sorted((e.start_s, e.end_s) for e in trace.events if e.kind == "python")
    for (a0, a1), (b0, _) in itertools.pairwise(held):
        assert b0 >= a1 - 1e-12, (a0, a1, b0)
    assert any(e.kind == "gil_wait" for e in trace.events)


def test_kernels_start_after_their_dispatch(classifier: Workload) -> None:
    trace = simulate(classifier, NODE, DPConfig(n_devices=4, batch_size=64))
    for d in range(4):
        first_dispatch = min(e.start_s for e in trace.filter(device=d, kind="python"))
        first_kernel = min(e.start_s for e in trace.filter(device=d, kind="forward"))
        assert first_kernel >= first_dispatch
        fwd = trace.filter(device=d, kind="forward")
        assert all(b.start_s >= a.end_s - 1e-15 for a, b in itertools.pairwise(fwd))


def test_scatter_and_reduce_match_the_collective_formulas() -> None:
    big = get_workload("resnet50")
    cfg = DPConfig(n_devices=4, batch_size=64)
    trace = simulate(big, NODE, cfg)
    scatter = [e for e in trace.events if e.kind == "scatter"]
    span = max(e.end_s for e in scatter) - min(e.start_s for e in scatter)
    nbytes = big.input_bytes * 64
    nvlink = achieved_link(NVLINK4)  # what NCCL reaches: spec x the NVLink fraction
    assert span + nvlink.latency_us * 1e-6 == pytest.approx(
        collective_time_s("scatter", nbytes, 4, nvlink, "naive"), rel=1e-9)
    # the reduce and the broadcast are NCCL's (torch.cuda.comm) over the 4 devices in use
    red = trace.filter(device=0, kind="reduce")[0]
    assert red.duration_s == pytest.approx(
        nccl_time_s("reduce", 4 * big.n_params, NODE, 4), rel=1e-12)
    rep = trace.filter(device=1, kind="replicate")[0]
    assert rep.duration_s == pytest.approx(
        nccl_time_s("broadcast", 4 * big.n_params, NODE, 4), rel=1e-12)


def test_host_input_crosses_pcie() -> None:
    big = get_workload("resnet50")
    trace = simulate(big, NODE, DPConfig(n_devices=2, batch_size=8, input_on="host"))
    scatter = trace.filter(kind="scatter")
    assert {e.device for e in scatter} == {0, 1}
    e0 = trace.filter(device=0, kind="scatter")[0]
    pcie = achieved_link(PCIE4_X16).bandwidth_GBps
    assert e0.duration_s == pytest.approx(big.input_bytes * 4 / (pcie * 1e9))


def test_python_overhead_grows_with_n_for_a_tiny_model(classifier: Workload) -> None:
    times = [step_result(simulate(classifier, NODE, DPConfig(n_devices=n, batch_size=64))).step_s
             for n in (1, 2, 4, 8)]
    assert times == sorted(times)  # more devices, more serial Python: slower
    python = [summary(simulate(classifier, NODE, DPConfig(n_devices=n, batch_size=64))).python_s
              for n in (2, 4, 8)]
    assert python[2] > 1.8 * python[1] > 3.2 * python[0]


def test_a_large_model_gets_faster_with_n() -> None:
    big = get_workload("resnet50")
    times = [step_result(simulate(big, NODE, DPConfig(n_devices=n, batch_size=256))).step_s
             for n in (1, 2, 4, 8)]
    assert times == sorted(times, reverse=True)
    assert times[0] / times[3] > 3


def test_slower_dispatch_serialises_the_threads(classifier: Workload) -> None:
    fast = simulate(classifier, NODE, DPConfig(n_devices=8, batch_size=64, op_gil_share=0.0))
    slow = simulate(classifier, NODE, DPConfig(n_devices=8, batch_size=64, op_gil_share=1.0))
    assert not [e for e in fast.events if e.kind == "gil_wait" and e.stream == "python"]
    assert summary(slow).phases["forward"][1] > summary(fast).phases["forward"][1]


# --- memory per device -----------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [
    DPConfig(n_devices=4, batch_size=10), DPConfig(n_devices=2, batch_size=8, input_on="host"),
    DPConfig(n_devices=4, batch_size=2), DPConfig(n_devices=1, batch_size=6),
    DPConfig(n_devices=3, batch_size=9, optimizer="sgd"),
])
@pytest.mark.parametrize("model", ["classifier", "resnet50", "gpt2-124m"])
def test_memory_at_the_loss_equals_the_closed_form(classifier: Workload, cfg: DPConfig,
                                                   model: str) -> None:
    workload = classifier if model == "classifier" else get_workload(model)
    trace = simulate(workload, NODE, cfg)
    held = bytes_at(trace, summary(trace).loss_time_s, range(cfg.n_devices))
    for d, expected in enumerate(bytes_at_loss(workload, cfg)):
        got = {k: v for k, v in held[d].items() if v}
        assert got == {k: v for k, v in expected.items() if v}, d


def test_device0_extra_for_a_classifier(classifier: Workload) -> None:
    cfg = DPConfig(n_devices=4, batch_size=16, input_on="host")
    extra = device0_extra_bytes(classifier, cfg)
    p, t = classifier.n_params, classifier.n_param_tensors
    assert extra["optimizer"] == 8 * p + 4 * t
    assert extra["gathered"] == 4 * 16 * 10
    assert extra["loss"] == 16 * (4 * 10 + 8)
    assert extra["input"] == extra["activations"] == extra["parameters"] == 0


def test_imbalance_grows_with_the_output_size(classifier: Workload) -> None:
    ratios = [summary(simulate(with_output_features(classifier, k), NODE,
                               DPConfig(n_devices=4, batch_size=64))).imbalance
              for k in (10, 1_000, 100_000)]
    assert ratios == sorted(ratios)
    assert ratios[-1] > 3 * ratios[0]
    assert all(r > 1 for r in ratios)


def test_with_output_features_sets_output_and_loss(classifier: Workload) -> None:
    w = with_output_features(classifier, 7)
    assert w.output_bytes(3) == 3 * 7 * 4
    assert w.loss_bytes == 7 * 4 + 8
    with pytest.raises(ValueError, match="out_features"):
        sim.with_output_features(classifier, 0)


def test_cpu_devices_run_kernels_inside_the_thread(classifier: Workload) -> None:
    cpu_node = Cluster("cpu", get_cluster("h100-node").device.__class__(
        "cpu", "cpu", 8.0, 0.1, 0.1, 20.0), 4, 1, NVLINK4)
    trace = simulate(classifier, cpu_node, DPConfig(n_devices=4, batch_size=64))
    assert step_result(trace).step_s > 0
    assert dataclasses.asdict(DPConfig()) == dataclasses.asdict(DPConfig())


# --- figures and the explorer -----------------------------------------------------------------


def test_scatter_gather_figure_has_a_frame_per_phase(classifier: Workload) -> None:
    trace = simulate(classifier, NODE, DPConfig(n_devices=4, batch_size=10))
    steps = phase_steps(trace)
    assert [s.name for s in steps] == list(PHASES)
    scatter = steps[0]
    assert sorted(dst for _, dst, _ in scatter.arrows) == [1, 2, 3]
    gather = next(s for s in steps if s.name == "gather")
    assert all(dst == 0 for _, dst, _ in gather.arrows)
    fig = scatter_gather(trace)
    assert isinstance(fig, go.Figure)
    assert [f.name for f in fig.frames] == list(PHASES)
    assert len(fig.layout.sliders[0].steps) == len(PHASES)
    with pytest.raises(ValueError, match="phases"):
        scatter_gather(simulate(classifier, NODE, DPConfig()).__class__("simulated"))


def test_memory_figures(classifier: Workload) -> None:
    trace = simulate(classifier, NODE, DPConfig(n_devices=4, batch_size=10))
    fig = memory_per_device(trace)
    names = [t.name for t in fig.data if t.showlegend]
    assert len(names) == len(set(names))
    assert "gathered" in names
    bars = peak_per_device(trace, limit_bytes=10**6)
    assert next(b.name for b in bars.data) == "parameters"


def test_explorer_summary_and_widget() -> None:
    _, summary = explore("mlp", 4, 32, 100_000)
    assert summary["imbalance"] > 2
    assert summary["fits"]
    assert "device 0 peak" in describe(summary)
    _, big = explore("llama-7b", 2, 8)
    assert not big["fits"]
    assert "OUT OF MEMORY" in describe(big)
    text, fig = render("resnet50", 2, 16, 0)
    assert text.startswith("simulated: ResNet-50")
    assert isinstance(fig, go.Figure)
    assert dp_explorer() is not None
