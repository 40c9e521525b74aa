"""DistributedDataParallel simulated: gradient buckets all-reduced while backward runs.

The step simulated by default is a step after the first: DDP has rebuilt its buckets in
the order backward produced the gradients (about the reverse of the parameters; pass
`ready_order` for a real model's). The first bucket is capped at `first_bucket_cap_mb`
(1 MiB, DDP's `_DEFAULT_FIRST_BUCKET_BYTES`, when bucket_cap_mb is not passed; an explicit
bucket_cap_mb caps it too: `first_bucket_cap_for`) so that communication starts early;
the others at `bucket_cap_mb` (25 MiB by default). `first_iteration=True` simulates DDP's
first step with the default find_unused_parameters=False: one bucket holding every
gradient, all-reduced after backward (see `ddp.buckets`). A bucket closes as soon
as its bytes reach the cap, so the tensor that crosses the cap stays in it. A bucket's
all-reduce starts when its last gradient is ready and runs on a communication stream, one
bucket at a time, while the rest of backward goes on. The optimizer waits for the last.
A bucket's all-reduce costs what `collectives.group_cost` says for the whole cluster:
NCCL's model on GPU links (`algorithm="auto"`: NCCL's choice), the closed form on generic
ones.

DDP's bookkeeping is modelled as one operator's overhead per gradient (its autograd hook)
and, unless `gradient_as_bucket_view`, a copy of every gradient into its bucket and of
the averaged buckets back into p.grad. Not modelled: DDP's Python work per step, and on
CPUs the cores that communication takes from compute.

Every rank runs the same timeline, so the Trace holds rank 0 (device 0). A Workload lists
layers, not tensors: by default each layer's gradients count as one tensor; pass
`tensors` (see `grad_tensors(workload, names=...)`) and `ready_order` for the exact
buckets of a real model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpsim.sim.collectives.cost import collective_time_s, ring_bytes_per_rank_formula
from dpsim.sim.collectives.group_cost import group_link, group_time_s
from dpsim.sim.collectives.nccl import group_shape
from dpsim.sim.cost.compute import backward_time_s, forward_time_s, optimizer_time_s
from dpsim.sim.cost.memory import checkpointed_activation_bytes, model_state_bytes
from dpsim.sim.hardware import Cluster, Device, Link
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.ddp.buckets import (
    Bucket,
    GradTensor,
    build_buckets,
    first_iteration_buckets,
    grad_tensors,
)
from dpsim.sim.strategies.ddp.config import DDPConfig
from dpsim.sim.strategies.inputs import require_state
from dpsim.sim.trace import Event, SimState, Trace
from dpsim.sim.workload import DTYPE_BYTES, Workload


@dataclass(frozen=True)
class DDPState(SimState):
    """What `simulate` hands to `step_result` and `buckets_of`."""

    world_size: int  # ranks; every one runs the trace's timeline
    batch_size: int  # samples per rank
    buckets: tuple[Bucket, ...]  # in the order they are all-reduced


def all_reduce_time_s(nbytes: int, world_size: int, link: Link, algorithm: str = "ring"
                      ) -> float:
    """Seconds to all-reduce one bucket of `nbytes` over `link` (the alpha-beta closed form,
    dpsim.sim.collectives.cost); `simulate` costs a cluster's buckets with `group_cost`."""
    return collective_time_s("all_reduce", nbytes, world_size, link, algorithm)


def simulate(workload: Workload, cluster: Cluster, config: DDPConfig | None = None, *,
             tensors: Sequence[GradTensor] | None = None,
             ready_order: Sequence[str] | None = None) -> Trace:
    """Timeline of one DDP step on rank 0 of `cluster` (every rank runs the same one).

    `tensors` and `ready_order`: a real model's gradients (see `build_buckets`).

    Events: per-layer forward and backward on stream "compute", one "all_reduce" per
    bucket on stream "comm", then the optimizer. Its state (`DDPState`): world_size,
    batch_size and the buckets. Trusts its inputs: the face (`strategies.dispatch.simulate`)
    checked them (each tensor's layer one of the workload's, `ready_order` naming them).
    """
    cfg = config or DDPConfig()
    n = cluster.world_size
    shape = group_shape(cluster)  # every rank, nodes filled first
    link = group_link(cluster, shape)
    device = cluster.device
    grads = list(tensors) if tensors is not None else grad_tensors(workload, cfg.dtype)
    buckets = (first_iteration_buckets(grads) if cfg.first_iteration else
               build_buckets(grads, cfg.bucket_cap_mb, cfg.first_bucket_cap_mb, ready_order))
    trace = Trace("simulated", meta={
        "strategy": "ddp", "workload": workload.name, "device": device.name,
        "link": link.name, "world_size": n, "batch_size": cfg.batch_size,
        "bucket_cap_mb": cfg.bucket_cap_mb, "first_bucket_cap_mb": cfg.first_bucket_cap_mb,
        "overlap": cfg.overlap}, state=DDPState(n, cfg.batch_size, tuple(buckets)))
    _memory_samples(trace, workload, cfg, sum(b.nbytes for b in buckets))
    per_layer: dict[int, tuple[int, int]] = {}  # layer -> (gradient tensors, bytes)
    if tensors is None:
        per_layer = {i: (layer.n_param_tensors, layer.n_params * DTYPE_BYTES[cfg.dtype])
                     for i, layer in enumerate(workload.layers)}
    for g in grads if tensors is not None else ():
        count, nbytes = per_layer.get(g.layer, (0, 0))
        per_layer[g.layer] = (count + 1, nbytes + g.nbytes)
    t = _compute_events(trace, workload, device, cfg, per_layer)
    backward_end = t
    ready = {e.label: e.end_s for e in trace.events if e.kind == "backward"}
    comm_free = 0.0
    for bucket in buckets:
        layer_name = workload.layers[bucket.ready_layer].name if workload.layers else ""
        ready_s = ready.get(layer_name, backward_end) if cfg.overlap else backward_end
        start = max(ready_s, comm_free)
        end = start + group_time_s("all_reduce", bucket.nbytes, cluster, shape, cfg.algorithm)
        trace.add(Event(0, "comm", "all_reduce", start, end, bucket.nbytes,
                        f"bucket {bucket.index}"))
        comm_free = end
    start = max(backward_end, comm_free)
    if not cfg.gradient_as_bucket_view:  # the averaged buckets are copied back into p.grad
        d = copy_time_s(sum(b.nbytes for b in buckets), device)
        trace.add(Event(0, "compute", "copy", start, start + d, label="buckets -> p.grad"))
        start += d
    d = optimizer_time_s(workload.n_params, workload.n_param_tensors, device, cfg.optimizer)
    trace.add(Event(0, "compute", "optimizer", start, start + d, label=cfg.optimizer))
    return trace


def copy_time_s(nbytes: int, device: Device) -> float:
    """Seconds to copy `nbytes` once in device memory (read + write)."""
    return 2 * nbytes / (device.mem_bw_GBps * 1e9)


def _compute_events(trace: Trace, workload: Workload, device: Device, cfg: DDPConfig,
                    per_layer: dict[int, tuple[int, int]]) -> float:
    """Add forward and backward events per layer; return the time backward ends.

    A layer's backward also pays DDP's hook per gradient tensor (one operator's overhead)
    and, without gradient_as_bucket_view, the copy of its gradient bytes into the buckets.
    """
    t = 0.0
    for layer in workload.layers:
        d = forward_time_s(layer, cfg.batch_size, device, cfg.dtype, workload.dtype)
        trace.add(Event(0, "compute", "forward", t, t + d, label=layer.name))
        t += d
    for index in reversed(range(len(workload.layers))):
        layer = workload.layers[index]
        count, nbytes = per_layer.get(index, (0, 0))
        d = backward_time_s(layer, cfg.batch_size, device, cfg.dtype, workload.dtype)
        if cfg.activation_checkpointing:  # the layer's forward runs again first
            d += forward_time_s(layer, cfg.batch_size, device, cfg.dtype, workload.dtype)
        d += count * device.op_overhead_us * 1e-6
        d += 0.0 if cfg.gradient_as_bucket_view else copy_time_s(nbytes, device)
        trace.add(Event(0, "compute", "backward", t, t + d, label=layer.name))
        t += d
    return t


def _memory_samples(trace: Trace, workload: Workload, cfg: DDPConfig, bucket_bytes: int) -> None:
    """Model states, the bucket copy of the gradients, and the batch's activations."""
    states = model_state_bytes(workload.n_params, workload.n_param_tensors, dtype=cfg.dtype,
                               optimizer=cfg.optimizer, mixed_precision=cfg.mixed_precision)
    trace.sample(0, 0.0, "parameters", states.parameters)
    trace.sample(0, 0.0, "optimizer", states.optimizer)
    trace.sample(0, 0.0, "gradients", states.gradients)
    trace.sample(0, 0.0, "buckets", 0 if cfg.gradient_as_bucket_view else bucket_bytes)
    trace.sample(0, 0.0, "activations", checkpointed_activation_bytes(
        workload, cfg.batch_size, cfg.dtype) if cfg.activation_checkpointing
        else workload.activation_bytes(cfg.batch_size, cfg.dtype))


def buckets_of(trace: Trace) -> list[Bucket]:
    """The buckets of a trace `simulate` made, in the order they are all-reduced."""
    return list(require_state(trace, DDPState, "ddp").buckets)


def step_result(trace: Trace, device: int = 0) -> StepResult:
    """Split one step of a DDP trace, simulated or measured, on `device`: compute, and
    communication hidden behind it or exposed; peak memory as the trace sampled it.
    `device` has events in `trace` (the face, `strategies.dispatch.step_result`, checks)."""
    events = trace.filter(device=device)
    step = max(e.end_s for e in events) - min(e.start_s for e in events)
    compute = trace.busy_s(device, "compute")
    comm = trace.busy_s(device, "comm")
    exposed = min(comm, max(0.0, step - compute))
    n, batch = _run_size(trace)
    reduced = sum(e.nbytes for e in events if e.stream == "comm")
    return StepResult(step, compute, max(0.0, comm - exposed), exposed, 0.0,
                      (trace.peak_memory(device),) * n,
                      int(ring_bytes_per_rank_formula(reduced, n)), batch, n)


def _run_size(trace: Trace) -> tuple[int, int]:
    """(ranks, samples per rank) of a simulated trace, or as a recording's meta labels them
    (a bare trace: its ranks, batch 0 for not recorded)."""
    if isinstance(trace.state, DDPState):
        return trace.state.world_size, trace.state.batch_size
    return (int(trace.meta.get("world_size", len(trace.devices))),
            int(trace.meta.get("batch_size", 0)))
