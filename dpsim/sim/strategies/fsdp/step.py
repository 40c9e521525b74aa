"""FSDP / ZeRO: one training step, unit by unit, on one representative device.

Every device runs the same schedule on a shard of the same size (FSDP pads shards to
equal size), so the step is simulated once, on device 0, and its summary says that the
other `world_size - 1` devices are identical. That keeps 1024 devices as cheap as 2.

Stage 3 (FSDP's FULL_SHARD), per unit (a group of consecutive layers):
forward:  all-gather the unit's parameters, compute, free them (reshard_after_forward);
backward: all-gather again, compute, reduce-scatter the gradients, free the parameters.
The last unit stays gathered between its forward and its backward, which comes right after
(FSDP does the same for the root module).
Stages 1 and 2 keep the parameters whole: they reduce-scatter gradients after each unit's
backward and all-gather the updated parameters after the optimizer step. Stage 0
(NO_SHARD, like DDP) all-reduces each unit's gradients. One comm stream runs the
collectives in the order they are issued (FIFO); the compute stream waits for them.
Each collective costs what `collectives.group_cost` says for the group (NCCL's model on
GPU links, the closed form on generic ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, cast

from dpsim.sim.checks import Each
from dpsim.sim.collectives.group_cost import group_time_s
from dpsim.sim.collectives.nccl import GroupShape, group_shape
from dpsim.sim.cost.compute import optimizer_time_s
from dpsim.sim.cost.memory import ZERO_STAGES, optimizer_state_bytes, precision_bytes_per_param
from dpsim.sim.hardware import Cluster
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.fsdp.closed_form import STAGE
from dpsim.sim.strategies.fsdp.config import TORCH_AMP_PRECISIONS, FSDPConfig
from dpsim.sim.strategies.fsdp.units import Unit, build_units
from dpsim.sim.strategies.inputs import require_state, require_workload
from dpsim.sim.trace import Event, SimState, Trace
from dpsim.sim.workload import DTYPE_BYTES, Workload


@dataclass(frozen=True)
class FSDPSummary:
    """What a simulated FSDP / ZeRO step records besides its StepResult (bytes)."""

    stage: int
    n_units: int
    devices_identical: bool  # one representative device stands for all
    comm_volume_bytes: int  # full-tensor size of every collective, an all-reduce twice
    model_bytes: int  # parameters in the communication dtype
    comm_to_model: float  # comm_volume_bytes / model_bytes
    breakdown: dict[str, int]  # bytes per category at the peak
    fits: bool  # the peak fits the device's memory
    samples_per_s: float  # global


@dataclass(frozen=True)
class FSDPState(SimState):
    """What `simulate` hands to `step_result` and `summary` (seconds, bytes)."""

    world_size: int  # devices, every one running the representative device's schedule
    batch_size: int  # samples per device
    step_time_s: float
    compute_s: float  # busy time of the compute stream
    comm_s: float  # busy time of the communication streams
    exposed_comm_s: float  # the step beyond its compute
    peak_bytes: int  # on every device
    sent_bytes_per_device: int
    summary: FSDPSummary

    def step_result(self) -> StepResult:
        """Compute, and communication hidden behind it or exposed; every device the same."""
        exposed, n = self.exposed_comm_s, self.world_size
        return StepResult(self.step_time_s, self.compute_s,
                          max(0.0, self.comm_s - exposed), exposed, 0.0,
                          (self.peak_bytes,) * n, self.sent_bytes_per_device,
                          self.batch_size, n)


def simulate(workload: Workload, cluster: Cluster, config: FSDPConfig) -> Trace:
    """Timeline and memory over one step on device 0; all devices are identical.

    Memory categories: "parameters" (the persistent shard or full copy), "gathered"
    (unsharded parameters of the units currently all-gathered), "gradients", "optimizer"
    (with the fp32 master copy under mixed precision), "activations". Its state
    (`FSDPState`): the step split, peak bytes, bytes sent, and `FSDPSummary` (breakdown
    at the peak, fits, communication volume against the model's bytes).
    """
    return FSDPStep(workload, cluster, config).run()


class FSDPStep:
    """The event loop of one step (a class so that the phases read in order).

    `hsdp.HSDPStep` extends it: its collectives over a process group (`group`), and
    `comm`, `optimizer_step` and `finish` overridden for the replicas.
    """

    def __init__(self, workload: Workload, cluster: Cluster, config: FSDPConfig,
                 group: tuple[Cluster, GroupShape] | None = None) -> None:
        self.w, self.cfg, self.cluster = workload, config, cluster
        self.n = cluster.world_size
        # the process group the collectives run over: (its cluster, its shape)
        self.group = group or (cluster, group_shape(cluster))
        self.units = build_units(workload, cluster, config)
        # p/g: gathered parameters and computed gradients; store_*: what stays between steps
        self.p_bytes, self.g_bytes, self.store_p, self.store_g, self.rs_bytes = _widths(config)
        self.trace = Trace("simulated", meta={
            "strategy": "fsdp", "stage": config.stage, "workload": workload.name,
            "cluster": cluster.name, "world_size": self.n, "batch_size": config.batch_size,
            "representative_device": 0, "devices_identical": True, "n_units": len(self.units)})
        self.deltas: list[tuple[float, str, int]] = []  # (time_s, category, bytes added)
        self.comm_free = 0.0  # comm stream clock
        self.t = 0.0  # compute stream clock
        self.volume = 0  # comm volume: collective sizes, an all-reduce counted twice
        self.cost_s: dict[tuple[str, int], float] = {}

    # --- helpers ---------------------------------------------------------------------
    def shard(self, nbytes_full: int, sharded: bool) -> int:
        """Bytes of a padded shard (ceil(n/N)) or of the full tensor."""
        return -(-nbytes_full // self.n) if sharded else nbytes_full

    def mem(self, time_s: float, category: str, delta: int) -> None:
        self.deltas.append((time_s, category, delta))

    def comm(self, kind: str, nbytes: int, ready_s: float, label: str) -> tuple[float, float]:
        """Queue a collective on the comm stream; return its (start, end) times."""
        if self.n == 1 or nbytes == 0:
            return ready_s, ready_s
        start = max(self.comm_free, ready_s)
        key = (kind, nbytes)
        if key not in self.cost_s:  # units of equal size share one cost evaluation
            self.cost_s[key] = group_time_s(kind, nbytes, *self.group, self.cfg.algorithm)
        end = start + self.cost_s[key]
        self.trace.add(Event(0, "comm", kind, start, end, nbytes, label))
        self.comm_free = end
        self.volume += nbytes * (2 if kind == "all_reduce" else 1)
        return start, end

    def compute(self, kind: str, ready_s: float, duration_s: float, label: str) -> float:
        """Run on the compute stream once `ready_s` has passed; return the start time."""
        start = max(self.t, ready_s)
        self.t = start + duration_s
        self.trace.add(Event(0, "compute", kind, start, self.t, 0, label))
        return start

    def gather(self, i: int, ready_s: float) -> float:
        """All-gather unit i's parameters (buffer allocated when it starts); return its end."""
        nbytes = self.units[i].n_params * self.p_bytes
        start, end = self.comm("all_gather", nbytes, ready_s, self.units[i].name)
        self.mem(start, "gathered", nbytes)
        return end

    def kept_bytes(self, u: Unit) -> int:
        return u.input_bytes if self.cfg.activation_checkpointing else u.activation_bytes

    # --- phases ----------------------------------------------------------------------
    def run(self) -> Trace:
        cfg, units = self.cfg, self.units
        n_params = sum(u.n_params for u in units)
        n_tensors = sum(u.n_param_tensors for u in units)
        opt_full = optimizer_state_bytes(n_params, n_tensors, cfg.optimizer,
                                         cfg.precision == "mixed",
                                         "fp32" if cfg.precision in TORCH_AMP_PRECISIONS
                                         else cfg.dtype)
        on_device = 0 if cfg.offload else 1  # offloaded shards live in host memory
        self.mem(0.0, "parameters", on_device * sum(
            self.shard(u.n_params * self.store_p, cfg.stage == 3) for u in units))
        self.mem(0.0, "optimizer", on_device * self.shard(opt_full, cfg.stage >= 1))
        for category in ("gathered", "gradients", "activations"):
            self.mem(0.0, category, 0)
        kept = self.forward_sharded() if cfg.stage == 3 else self.forward_replicated()
        self.backward(kept)
        self.optimizer_step(n_params, n_tensors)
        self.trace.state = self.finish(n_params)
        return self.trace

    def forward_replicated(self) -> dict[int, float]:
        for u in self.units:
            self.compute("forward", self.t, u.forward_s, u.name)
            self.mem(self.t, "activations", self.kept_bytes(u))
        return {}

    def forward_sharded(self) -> dict[int, float]:
        """Stage 3 forward; return {unit: time its parameters were ready} for units kept."""
        cfg, units = self.cfg, self.units
        last = len(units) - 1
        ready: dict[int, float] = {0: self.gather(0, 0.0)} if units else {}
        kept: dict[int, float] = {}
        for i, u in enumerate(units):
            start = self.compute("forward", ready[i], u.forward_s, u.name)
            if i < last and cfg.forward_prefetch:
                ready[i + 1] = self.gather(i + 1, start)
            self.mem(self.t, "activations", self.kept_bytes(u))
            if cfg.reshard_after_forward and i < last:  # the last unit is needed right away
                self.mem(self.t, "gathered", -u.n_params * self.p_bytes)
            else:
                kept[i] = ready[i]
            if i < last and not cfg.forward_prefetch:
                ready[i + 1] = self.gather(i + 1, self.t)
        return kept

    def backward(self, ready: dict[int, float]) -> None:
        cfg, units = self.cfg, self.units
        stage3, ckpt = cfg.stage == 3, cfg.activation_checkpointing
        scale = cfg.batch_size * DTYPE_BYTES[cfg.dtype] / DTYPE_BYTES[self.w.dtype]
        self.mem(self.t, "activations", int(self.w.loss_bytes * scale))
        for i in range(len(units) - 1, -1, -1):
            u = units[i]
            if stage3 and i not in ready:
                ready[i] = self.gather(i, self.t)
            start = self.compute("backward", ready.get(i, 0.0),
                                 u.backward_s + (u.forward_s if ckpt else 0.0), u.name)
            if stage3 and cfg.backward_prefetch and i > 0 and (i - 1) not in ready:
                ready[i - 1] = self.gather(i - 1, start)
            grad_full = u.n_params * (self.g_bytes if cfg.stage >= 2 else self.store_g)
            self.mem(start, "gradients", grad_full)
            if ckpt:
                self.mem(start, "activations", u.activation_bytes)
            self.mem(self.t, "activations", -u.activation_bytes - (u.input_bytes if ckpt else 0))
            if stage3:
                self.mem(self.t, "gathered", -u.n_params * self.p_bytes)
            sent = u.n_params * self.rs_bytes
            if cfg.stage == 0:
                self.comm("all_reduce", sent, self.t, u.name)
                continue
            _, end = self.comm("reduce_scatter", sent, self.t, u.name)
            if cfg.stage >= 2:  # the full gradient is freed once its shard has arrived
                kept = 0 if cfg.offload else self.shard(u.n_params * self.store_g, True)
                self.mem(end, "gradients", kept - grad_full)
        self.mem(self.t, "activations", -int(self.w.loss_bytes * scale))

    def optimizer_step(self, n_params: int, n_tensors: int) -> None:
        cfg = self.cfg
        local = -(-n_params // self.n) if cfg.stage >= 1 else n_params
        d = optimizer_time_s(local, n_tensors, self.cluster.device, cfg.optimizer)
        self.compute("optimizer", self.comm_free, d, cfg.optimizer)
        if cfg.stage in (1, 2):  # every device's updated slice goes to every device
            for u in self.units:
                self.comm("all_gather", u.n_params * self.store_p, self.t, u.name)

    def finish(self, n_params: int) -> SimState:
        """Write the memory samples; return the state `simulate` attaches to the trace."""
        return self.group_state(n_params)

    def group_state(self, n_params: int) -> FSDPState:
        """Write the memory samples; the step as this process group ran it."""
        tr, cfg = self.trace, self.cfg
        totals: dict[str, int] = {}
        for time_s, category, delta in sorted(self.deltas, key=lambda d: d[0]):
            totals[category] = totals.get(category, 0) + delta
            tr.sample(0, time_s, category, totals[category])
        end = max(self.t, self.comm_free)
        compute_s = tr.busy_s(0, "compute")
        peak_at = tr.memory_at_peak(0)
        model_bytes = n_params * self.p_bytes
        peak = sum(peak_at.values())
        return FSDPState(
            world_size=self.n, batch_size=cfg.batch_size, step_time_s=end,
            compute_s=compute_s, comm_s=tr.busy_s(0, "comm"),
            exposed_comm_s=max(0.0, end - compute_s), peak_bytes=peak,
            sent_bytes_per_device=int(self.volume * (self.n - 1) / self.n),
            summary=FSDPSummary(
                stage=cfg.stage, n_units=len(self.units), devices_identical=True,
                comm_volume_bytes=self.volume, model_bytes=model_bytes,
                comm_to_model=self.volume / model_bytes if model_bytes else 0.0,
                breakdown=peak_at, fits=peak <= self.cluster.device.memory_bytes,
                samples_per_s=cfg.batch_size * self.n / end if end > 0 else float("inf")))


def _widths(cfg: FSDPConfig) -> tuple[int, int, int, int, int]:
    """Bytes per parameter: (gathered parameter, computed gradient, stored parameter,
    stored gradient, reduced gradient). torch_amp gathers and computes in bf16, keeps fp32
    and reduce-scatters in fp32 (torch_amp_bf16_reduce: in bf16, FSDP2's default
    reduce_dtype=None); the other precisions keep what they compute in."""
    if cfg.precision == "torch_amp":
        return 2, 2, 4, 4, 4
    if cfg.precision == "torch_amp_bf16_reduce":
        return 2, 2, 4, 4, 2
    p, g, _ = precision_bytes_per_param(cfg.precision, cfg.optimizer)
    return p, g, p, g, g


def summary(trace: Trace) -> FSDPSummary:
    """The FSDP-specific numbers of a trace `simulate` made."""
    return require_state(trace, FSDPState, "fsdp").summary


def step_result(trace: Trace) -> StepResult:
    """The step of a trace `simulate` made: compute, and communication hidden behind it
    or exposed (the time the step is longer than its compute); every device the same."""
    return cast(FSDPState, trace.state).step_result()


def compare_stages(workload: Workload, cluster: Cluster, config: FSDPConfig,
                   stages: Annotated[Sequence[int], Each(STAGE)] = ZERO_STAGES
                   ) -> dict[str, Trace]:
    """The same step under each ZeRO stage: {"ZeRO-0 (DDP)": trace, ..., "ZeRO-3 (FSDP)": ...}."""
    names = {0: "ZeRO-0 (DDP)", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 (FSDP)"}
    require_workload(workload)  # a layer that computes, so that a step takes time
    return {names[s]: simulate(workload, cluster, replace(config, stage=s)) for s in stages}
