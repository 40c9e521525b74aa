"""FSDP / ZeRO: one training step, unit by unit, on one representative device.

Every device runs the same schedule on a shard of the same size (FSDP pads shards to
equal size), so the step is simulated once, on device 0, and `trace.meta` says that the
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

from dataclasses import dataclass, replace

from dpsim.sim.collectives.group_cost import group_time_s
from dpsim.sim.collectives.nccl import GroupShape, group_shape
from dpsim.sim.cost.compute import optimizer_time_s
from dpsim.sim.cost.memory import ZERO_STAGES, optimizer_state_bytes, precision_bytes_per_param
from dpsim.sim.hardware import Cluster
from dpsim.sim.strategies.base import CrossoverTerms, Placement, StepResult, split_evenly
from dpsim.sim.strategies.fsdp_closed_form import (
    FSDPConfig as FSDPConfig,  # re-exported, like below
)
from dpsim.sim.strategies.fsdp_closed_form import (
    communication_bytes_per_step as communication_bytes_per_step,
)
from dpsim.sim.strategies.fsdp_units import Unit
from dpsim.sim.strategies.fsdp_units import build_units as build_units
from dpsim.sim.strategies.inputs import (
    require_cluster,
    require_config,
    require_ints,
    require_make_config,
    require_step_time,
    require_terms,
    require_trace,
    require_workload,
)
from dpsim.sim.trace import Event, Trace
from dpsim.sim.validation import require_int
from dpsim.sim.workload import DTYPE_BYTES, Workload


def simulate(workload: Workload, cluster: Cluster, config: FSDPConfig) -> Trace:
    """Timeline and memory over one step on device 0; all devices are identical.

    Memory categories: "parameters" (the persistent shard or full copy), "gathered"
    (unsharded parameters of the units currently all-gathered), "gradients", "optimizer"
    (with the fp32 master copy under mixed precision), "activations". meta holds
    step_time_s, compute_s, comm_s, exposed_comm_s, peak_bytes, breakdown (at peak),
    fits, comm_volume_bytes, model_bytes, comm_to_model, sent_bytes_per_device.
    """
    require_workload(workload)
    require_cluster(cluster)
    require_config(config, FSDPConfig)
    return _Step(workload, cluster, config).run()


class _Step:
    """The event loop of one step (a class so that the phases read in order)."""

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
                                         "fp32" if cfg.precision == "torch_amp" else cfg.dtype)
        on_device = 0 if cfg.offload else 1  # offloaded shards live in host memory
        self.mem(0.0, "parameters", on_device * sum(
            self.shard(u.n_params * self.store_p, cfg.stage == 3) for u in units))
        self.mem(0.0, "optimizer", on_device * self.shard(opt_full, cfg.stage >= 1))
        for category in ("gathered", "gradients", "activations"):
            self.mem(0.0, category, 0)
        kept = self.forward_sharded() if cfg.stage == 3 else self.forward_replicated()
        self.backward(kept)
        self.optimizer_step(n_params, n_tensors)
        return self.finish(n_params)

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

    def finish(self, n_params: int) -> Trace:
        tr, cfg = self.trace, self.cfg
        totals: dict[str, int] = {}
        for time_s, category, delta in sorted(self.deltas, key=lambda d: d[0]):
            totals[category] = totals.get(category, 0) + delta
            tr.sample(0, time_s, category, totals[category])
        end = require_step_time(max(self.t, self.comm_free), self.cluster)
        compute_s = tr.busy_s(0, "compute")
        peak_at = tr.memory_at_peak(0)
        model_bytes = n_params * self.p_bytes
        tr.meta.update({
            "step_time_s": end,
            "compute_s": compute_s,
            "comm_s": tr.busy_s(0, "comm"),
            "exposed_comm_s": max(0.0, end - compute_s),
            "peak_bytes": sum(peak_at.values()),
            "breakdown": peak_at,
            "fits": sum(peak_at.values()) <= self.cluster.device.memory_bytes,
            "comm_volume_bytes": self.volume,
            "model_bytes": model_bytes,
            "comm_to_model": self.volume / model_bytes if model_bytes else 0.0,
            "sent_bytes_per_device": int(self.volume * (self.n - 1) / self.n),
            "samples_per_s": cfg.batch_size * self.n / end if end > 0 else float("inf"),
        })
        return tr


def _widths(cfg: FSDPConfig) -> tuple[int, int, int, int, int]:
    """Bytes per parameter: (gathered parameter, computed gradient, stored parameter,
    stored gradient, reduced gradient). torch_amp gathers and computes in bf16, keeps fp32
    and reduce-scatters in fp32; the other precisions keep what they compute in."""
    if cfg.precision == "torch_amp":
        return 2, 2, 4, 4, 4
    p, g, _ = precision_bytes_per_param(cfg.precision, cfg.optimizer)
    return p, g, p, g, g


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


def summary(trace: Trace) -> FSDPSummary:
    """The FSDP-specific numbers of a trace `simulate` made."""
    m = require_trace(trace, "fsdp").meta
    return FSDPSummary(m["stage"], m["n_units"], bool(m["devices_identical"]),
                       m["comm_volume_bytes"], m["model_bytes"], m["comm_to_model"],
                       dict(m["breakdown"]), bool(m["fits"]), m["samples_per_s"])


def step_result(trace: Trace) -> StepResult:
    """The step of a trace `simulate` made: compute, and communication hidden behind it
    or exposed (the time the step is longer than its compute); every device the same."""
    m = require_trace(trace, "fsdp").meta
    exposed, n = m["exposed_comm_s"], m["world_size"]
    return StepResult(m["step_time_s"], m["compute_s"], max(0.0, m["comm_s"] - exposed),
                      exposed, 0.0, (int(m["peak_bytes"]),) * n,
                      int(m["sent_bytes_per_device"]), m["batch_size"], n)


def compare_stages(workload: Workload, cluster: Cluster, config: FSDPConfig,
                   stages: tuple[int, ...] = ZERO_STAGES) -> dict[str, Trace]:
    """The same step under each ZeRO stage: {"ZeRO-0 (DDP)": trace, ..., "ZeRO-3 (FSDP)": ...}."""
    names = {0: "ZeRO-0 (DDP)", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3 (FSDP)"}
    require_config(config, FSDPConfig)
    require_ints("stages", stages, 0, 3)
    return {names[s]: simulate(workload, cluster, replace(config, stage=s)) for s in stages}


@dataclass(frozen=True)
class FSDPStrategy:
    """One ZeRO stage of FSDP as the planner sees it (implements strategies.base.Strategy)."""

    stage: int  # 1, 2 or 3
    name: str
    label: str
    placement: Placement
    config_type = FSDPConfig

    def __post_init__(self) -> None:
        require_int("stage", self.stage, 1, 3)
        for name in ("name", "label"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; allowed: a "
                                 "non-empty string")
        if not isinstance(self.placement, Placement):
            raise ValueError(f"placement={self.placement!r} is not a Placement; allowed: a "
                             "strategies.base.Placement")
    single_node = False
    max_devices = None

    def split_batch(self, n_devices: int, global_batch: int) -> int:
        """The same samples on every device."""
        return split_evenly(n_devices, global_batch)

    def make_config(self, batch_per_device: int, global_batch: int, n_devices: int,
                    optimizer: str, precision: str) -> FSDPConfig:
        """One unit per layer, prefetch on, this strategy's stage."""
        require_make_config(batch_per_device, global_batch, n_devices, optimizer, precision)
        return FSDPConfig(batch_size=batch_per_device, stage=self.stage, precision=precision,
                          optimizer=optimizer)

    def simulate(self, workload: Workload, cluster: Cluster, config: FSDPConfig) -> Trace:
        """See `simulate`."""
        return simulate(workload, cluster, config)

    def step_result(self, trace: Trace) -> StepResult:
        """See `step_result`."""
        return step_result(trace)

    def crossover_terms(self, workload: Workload, dtype: str) -> CrossoverTerms | None:
        """ZeRO-3: two all-gathers and a reduce-scatter (3 model sizes), 3 latencies per
        unit (one per layer), hidden behind forward and backward; None for stages 1-2."""
        require_terms(workload, dtype)
        if self.stage != 3:
            return None
        return CrossoverTerms(3.0, 3 * len(workload.layers), True, "all_gather")


ZERO1 = FSDPStrategy(1, "zero1", "ZeRO-1 (optimizer state sharded)", Placement(
    "parameters, gradients", "optimizer state, the batch", "optimizer state is what does not fit"))
ZERO2 = FSDPStrategy(2, "zero2", "ZeRO-2 (gradients sharded too)", Placement(
    "parameters", "gradients, optimizer state, the batch",
    "gradients + optimizer state do not fit"))
ZERO3 = FSDPStrategy(3, "fsdp", "FSDP / ZeRO-3", Placement(
    "nothing", "parameters, gradients, optimizer state, the batch",
    "the model's states do not fit one device"))
