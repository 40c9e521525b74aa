"""One device, one process: the baseline every other strategy is measured against."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, cast

from dpsim.sim.checks import Each, OneOf, check_fields
from dpsim.sim.cost.compute import backward_time_s, forward_time_s, optimizer_time_s
from dpsim.sim.cost.memory import OPTIMIZERS, MemoryBreakdown, predict_single
from dpsim.sim.cost.precision import policy_model_state_bytes, precision_policy
from dpsim.sim.hardware import Cluster, Device
from dpsim.sim.limits import Samples
from dpsim.sim.strategies.base import Placement, StepResult, Strategy
from dpsim.sim.strategies.inputs import require_state
from dpsim.sim.trace import Event, SimState, Trace
from dpsim.sim.workload import DTYPE_BYTES, PRESETS, Workload

Optimizer = Annotated[str, OneOf(OPTIMIZERS)]  # one of memory.OPTIMIZERS
Dtype = Annotated[str, OneOf(tuple(DTYPE_BYTES))]  # "fp32", "bf16", "fp16"


@dataclass(frozen=True)
class SingleConfig:
    """A single-device training step."""

    batch_size: Samples = 32  # samples per step
    optimizer: Optimizer = "adam"  # one of memory.OPTIMIZERS
    dtype: Dtype = "fp32"  # compute dtype: "fp32", "bf16", "fp16"
    mixed_precision: bool = False  # 16-bit working copy + fp32 master and moments

    def __post_init__(self) -> None:
        check_fields(self)
        if self.mixed_precision and self.dtype == "fp32":
            raise ValueError("dtype='fp32' with mixed_precision=True; allowed: 'bf16' or 'fp16'")


@dataclass(frozen=True)
class SingleSummary:
    """What a simulated single-device step records besides its StepResult."""

    samples_per_s: float  # batch / step time
    fits: bool  # the predicted peak fits the device's memory


@dataclass(frozen=True)
class SingleState(SimState):
    """What `simulate` hands to `step_result`, `breakdown` and `summary`."""

    batch_size: int  # samples in the step
    step_time_s: float
    breakdown: MemoryBreakdown  # the predicted peak, by category
    summary: SingleSummary


def simulate(workload: Workload, device: Device, config: SingleConfig) -> Trace:
    """Timeline (forward, backward, optimizer per layer) and memory over one step.

    Its state (`SingleState`): the step time, the predicted peak breakdown, throughput
    and whether the peak fits the device.
    """
    b, dt = config.batch_size, config.dtype
    states = predict_single(workload, 0, optimizer=config.optimizer, dtype=dt,
                            mixed_precision=config.mixed_precision)
    trace = Trace("simulated", meta={"strategy": "single", "device": device.name,
                                     "workload": workload.name, "batch_size": b})
    trace.sample(0, 0.0, "parameters", states.parameters)
    trace.sample(0, 0.0, "optimizer", states.optimizer)
    trace.sample(0, 0.0, "gradients", 0)
    trace.sample(0, 0.0, "activations", 0)
    t = 0.0
    act = 0
    act_scale = b * DTYPE_BYTES[dt] / DTYPE_BYTES[workload.dtype]
    for layer in workload.layers:
        d = forward_time_s(layer, b, device, dt, workload.dtype)
        trace.add(Event(0, "compute", "forward", t, t + d, label=layer.name))
        t += d
        act += int(layer.activation_bytes * act_scale)
        trace.sample(0, t, "activations", act)
    act += int(workload.loss_bytes * act_scale)
    trace.sample(0, t, "activations", act)
    grads = 0
    grad_width = states.gradients / workload.n_params if workload.n_params else 0
    for layer in reversed(workload.layers):
        d = backward_time_s(layer, b, device, dt, workload.dtype)
        trace.add(Event(0, "compute", "backward", t, t + d, label=layer.name))
        t += d
        grads += int(layer.n_params * grad_width)
        act -= int(layer.activation_bytes * act_scale)
        trace.sample(0, t, "gradients", grads)
        trace.sample(0, t, "activations", max(act, 0))
    d = optimizer_time_s(workload.n_params, workload.n_param_tensors, device, config.optimizer)
    trace.add(Event(0, "compute", "optimizer", t, t + d, label=config.optimizer))
    t += d
    peak = predict_single(workload, b, optimizer=config.optimizer, dtype=dt,
                          mixed_precision=config.mixed_precision)
    trace.state = SingleState(b, t, peak, SingleSummary(
        b / t if t > 0 else float("inf"), peak.total <= device.memory_bytes))
    return trace


def breakdown(trace: Trace) -> MemoryBreakdown:
    """The predicted peak breakdown of a trace `simulate` made."""
    return require_state(trace, SingleState, "single").breakdown


def summary(trace: Trace) -> SingleSummary:
    """Throughput and fit of a trace `simulate` made."""
    return require_state(trace, SingleState, "single").summary


def step_result(trace: Trace) -> StepResult:
    """The step of a trace `simulate` made: all compute, no communication."""
    s = cast(SingleState, trace.state)
    step = s.step_time_s
    return StepResult(step, step, 0.0, 0.0, 0.0, (s.breakdown.total,), 0, s.batch_size, 1)


class SingleStrategy(Strategy[SingleConfig]):
    """One device as the planner sees it; bf16 working copy with fp32 master under
    "mixed" (the default `make_config`)."""

    name = "single"
    label = "single device"
    placement = Placement("everything", "nothing", "the model and a useful batch fit one device")
    config_type = SingleConfig
    max_devices = 1

    def split_batch(self, n_devices: int, global_batch: int) -> int:
        """The whole batch; ValueError unless n_devices is 1."""
        if n_devices != 1:
            raise ValueError(f"n_devices={n_devices} with strategy='single'; allowed: 1")
        return global_batch

    def simulate(self, workload: Workload, cluster: Cluster, config: SingleConfig) -> Trace:
        """One step on the cluster's device."""
        return simulate(workload, cluster.device, config)

    def step_result(self, trace: Trace) -> StepResult:
        """See `step_result`."""
        return step_result(trace)


STRATEGY = SingleStrategy()


def fit_rows(models: Annotated[Sequence[str], Each(OneOf(PRESETS))], device: Device,
             batch_size: Samples = 1) -> list[dict[str, object]]:
    """For each preset model: GiB in fp32 and under torch.autocast (bf16) with Adam, and fits.

    torch.autocast keeps fp32 parameters, gradients and Adam moments (4 + 4 + 8 B/param, as in
    fp32) and bf16 activations.
    """
    from dpsim.sim.workload import get_workload

    rows: list[dict[str, object]] = []
    for name in models:
        workload = get_workload(name)
        fp32 = predict_single(workload, batch_size, optimizer="adam")
        states = policy_model_state_bytes(workload.n_params, workload.n_param_tensors,
                                          precision_policy("torch_amp"), "adam")
        autocast = MemoryBreakdown(states.parameters, states.gradients, states.optimizer,
                                   workload.activation_bytes(batch_size, "bf16"))
        for label, peak in (("fp32", fp32), ("bf16 autocast", autocast)):
            rows.append({
                "name": f"{workload.name} {label}",
                "GiB": round(peak.total / 1024**3, 1),
                "model_states_GiB": round(peak.model_states / 1024**3, 1),
                "bytes_per_param": round(peak.model_states / workload.n_params, 2),
                "fits": peak.total <= device.memory_bytes,
            })
    return rows
