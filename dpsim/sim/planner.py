"""Choosing a strategy: one training step of any strategy on any cluster, in one result.

`plan` runs any registered strategy (strategies.registry: single, dp, ddp, zero1/2, fsdp)
and reports its step split into compute, communication hidden behind it and exposed,
memory per device with the devices that run out, throughput and scaling efficiency.
`scaling_curve` repeats it from 1 to 1024 devices (strong: fixed global batch; weak:
fixed batch per device), and `crossover` gives the closed form for the number of devices
where communication stops hiding behind computation. Everything is simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from dpsim.sim.checks import Each, Instance, Int, OneOf, require_choice, require_int
from dpsim.sim.collectives.group_cost import group_link, uses_nccl
from dpsim.sim.collectives.nccl import group_shape
from dpsim.sim.cost.compute import backward_time_s, forward_time_s, step_compute_s
from dpsim.sim.cost.memory import CATEGORIES, PRECISIONS, Optimizer, precision_dtype
from dpsim.sim.hardware import Cluster, Link
from dpsim.sim.limits import MAX_BATCH, MAX_NODES, MAX_PLANNER_DEVICES, Samples
from dpsim.sim.strategies.crossover import crossover_formula as crossover_formula  # re-exported
from dpsim.sim.strategies.crossover import solve_crossover, topology_crossover
from dpsim.sim.strategies.inputs import require_workload, shown
from dpsim.sim.strategies.knobs import (
    DEFAULT_PRECISION,
    PLANNER_PRECISIONS,
    apply_knobs,
    base_precision,
    resolve_precision,
)
from dpsim.sim.strategies.registry import get_strategy, names
from dpsim.sim.trace import Trace
from dpsim.sim.workload import DTYPE_BYTES, Workload

# the precisions every strategy's planner config takes: fp32 everywhere, or bf16 compute
# with fp32 master and moments ("mixed"); pure "bf16" only FSDPConfig takes
PLAN_PRECISIONS = tuple(p for p in PRECISIONS if p != "bf16")
POWERS_OF_TWO = tuple(2**k for k in range(11))  # 1 .. 1024 devices
MODES = ("strong", "weak")

# the hints of the planner's arguments
StrategyName = Annotated[str, OneOf(names)]  # a registered strategy
Devices = Annotated[int, Int(1, MAX_PLANNER_DEVICES)]  # devices of one planned step
DeviceCounts = Annotated[Sequence[int], Each(Int(1, MAX_PLANNER_DEVICES))]  # at least one
PlannerPrecision = Annotated[str, OneOf(PLANNER_PRECISIONS)]
Mode = Annotated[str, OneOf(MODES)]


@dataclass(frozen=True)
class PlanResult:
    """One simulated training step of `strategy` on `n_devices` devices (seconds, bytes)."""

    strategy: str
    label: str  # the strategy's name for people, e.g. "FSDP / ZeRO-3"
    n_devices: int
    global_batch: int
    batch_per_device: int  # largest local batch (DP's chunks may differ)
    step_s: float
    compute_s: float  # forward + backward + optimizer on the busiest device
    hidden_comm_s: float  # communication that ran while compute ran
    exposed_comm_s: float  # communication the step waited for
    other_s: float  # remaining host time (DP: Python threads, GIL, gathers on device 0)
    peak_bytes: tuple[int, ...]  # peak memory per device, index = device
    memory_bytes: int  # what one device has
    traffic_bytes_per_device: int  # bytes one device sends per step
    single_device_s: float  # one device, the same local batch, no communication at all
    # parameters + gradients + optimizer state per device after the step (no activations,
    # buckets or gathered parameters): what a rank's own tensors hold once the step is done
    model_state_bytes: tuple[int, ...] = ()

    @property
    def oom_devices(self) -> list[int]:
        """Devices whose peak does not fit their memory."""
        return [d for d, b in enumerate(self.peak_bytes) if b > self.memory_bytes]

    @property
    def fits(self) -> bool:
        """True when every device fits."""
        return not self.oom_devices

    @property
    def samples_per_s(self) -> float:
        """Global throughput."""
        return self.global_batch / self.step_s if self.step_s > 0 else 0.0

    @property
    def scaling_efficiency(self) -> float:
        """Throughput per device relative to one device running the same local batch."""
        return min(1.0, self.single_device_s / self.step_s) if self.step_s > 0 else 1.0


def check_batch(strategy: str, n_devices: int, global_batch: int) -> int:
    """Samples on the busiest device; ValueError when the strategy cannot split the batch."""
    return get_strategy(strategy).split_batch(n_devices, global_batch)


def plan(workload: Workload, cluster: Cluster, strategy: StrategyName, n_devices: Devices,
         global_batch: Samples, *, precision: PlannerPrecision = DEFAULT_PRECISION,
         optimizer: Optimizer = "adam", activation_checkpointing: bool = False,
         offload: bool = False) -> PlanResult:
    """Simulate one step of `strategy` on `cluster` resized to `n_devices` devices.

    The cluster preset gives the device and the links (nodes fill first; beyond one node
    the inter-node link is used). A strategy run by one process (DP) is limited to one node.
    precision "torch_amp", activation_checkpointing and offload are the knobs of
    `strategies.knobs` (taken by the strategies whose config has them). precision "default"
    is the strategy's own: "torch_amp" for FSDP (fully_shard with
    MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32): fp32
    states, bf16 compute, fp32 reduce-scatter), "mixed" (ZeRO's 2 + 2 + 12) for the others;
    `knobs.PRECISION_SETTINGS` names the setting each precision stands for.
    """
    require_workload(workload)  # a layer that computes
    s = get_strategy(strategy)
    b = check_batch(strategy, n_devices, global_batch)
    if s.single_node:
        require_int("n_devices", n_devices, 1, cluster.devices_per_node)
    precision = resolve_precision(strategy, precision)
    base = base_precision(precision)
    sized = cluster.with_devices(n_devices)
    one = step_compute_s(workload, b, sized.device, precision_dtype(base), optimizer)
    config = apply_knobs(s.make_config(b, global_batch, n_devices, optimizer, base), strategy,
                         precision, activation_checkpointing, offload)
    trace = s.simulate(workload, sized, config)
    r = s.step_result(trace)
    return PlanResult(strategy, s.label, r.n_devices, global_batch, r.batch_per_device,
                      r.step_s, r.compute_s, r.hidden_comm_s, r.exposed_comm_s, r.other_s,
                      r.peak_bytes, sized.device.memory_bytes, r.sent_bytes_per_device, one,
                      model_states_after_step(trace, r.n_devices))


MODEL_STATES = CATEGORIES[:3]  # parameters, gradients, optimizer


def model_states_after_step(trace: Trace, n_devices: int) -> tuple[int, ...]:
    """Bytes of parameters, gradients and optimizer state on each device at the trace's
    last memory sample (a trace whose devices are identical samples device 0 only)."""
    sampled = set(trace.devices)
    out = []
    for d in range(n_devices):
        timeline = trace.memory_timeline(d if d in sampled else 0)
        last = timeline[-1][1] if timeline else {}
        out.append(sum(last.get(c, 0) for c in MODEL_STATES))
    return tuple(out)


def scaling_curve(workload: Workload, cluster: Cluster, strategy: StrategyName,
                  batch: Samples, *, mode: Mode = "strong",
                  n_devices: DeviceCounts = POWERS_OF_TWO,
                  precision: PlannerPrecision = DEFAULT_PRECISION, optimizer: Optimizer = "adam",
                  activation_checkpointing: bool = False, offload: bool = False
                  ) -> list[PlanResult]:
    """`plan` at each device count: strong keeps the global batch `batch`, weak keeps
    `batch` per device. Counts that do not split the global batch are skipped."""
    if mode == "weak":  # batch * n samples in all
        require_int("batch", batch, 1, MAX_BATCH // max(n_devices))
    s = get_strategy(strategy)
    precision = resolve_precision(strategy, precision)
    out = []
    for n in n_devices:
        if s.single_node and n > cluster.devices_per_node:
            continue
        global_batch = batch if mode == "strong" else batch * n
        if mode == "strong" and (global_batch % n or global_batch < n):
            continue
        out.append(plan(workload, cluster, strategy, n, global_batch, precision=precision,
                        optimizer=optimizer, activation_checkpointing=activation_checkpointing,
                        offload=offload))
    if not out:
        raise ValueError(f"batch={batch} splits over none of n_devices={list(n_devices)}; "
                         "allowed: a batch that is a multiple of some device count")
    return out


def efficiencies(curve: Annotated[Sequence[PlanResult], Each(Instance(PlanResult))],
                 mode: Mode = "strong") -> list[float]:
    """Scaling efficiency against the curve's first point: strong t1 / (N tN), weak t1 / tN."""
    first = curve[0]
    out = []
    for p in curve:
        ratio = p.n_devices / first.n_devices
        ideal = first.step_s / ratio if mode == "strong" else first.step_s
        out.append(ideal / p.step_s if p.step_s > 0 else 1.0)
    return out


# --- the crossover: where communication stops hiding behind computation --------------------

@dataclass(frozen=True)
class Crossover:
    """Closed-form and simulated device counts where communication outgrows its cover."""

    strategy: str
    label: str  # the strategy's name for people
    global_batch: int
    hide_s_per_sample: float  # c: compute seconds per sample the communication hides behind
    hide_fixed_s: float  # c0: the part of that compute that does not shrink with the batch
    comm_factor: float  # k: model-sized transfers per step, 2 (all-reduce) or 3 (ZeRO-3)
    model_bytes: int  # S: parameters (= gradients) in the communication dtype
    alpha_terms: int  # A: latencies per step per extra device (2 per bucket; 3 per unit)
    link: Link  # the link (B, alpha) used at the predicted crossover
    formula_devices: float  # N* from the formula
    simulated_devices: int | None  # first count where simulated comm >= its cover; None: never
    topology: bool = False  # True: NCCL's costs, c0 + c*G/N = C*t_N(k*S/(m*C)) (GPU links)
    collectives: int = 0  # C: collectives per step (the topology form)

    @property
    def formula(self) -> str:
        """The formula with its numbers."""
        if self.topology:
            return (f"c0 + c*G/N = C*t_N(k*S/(m*C))  ->  N* = {self.formula_devices:.3g}  "
                    f"(c0 = {self.hide_fixed_s * 1e3:.3g} ms, c = "
                    f"{self.hide_s_per_sample * 1e3:.3g} ms, G = {self.global_batch}, k = "
                    f"{self.comm_factor:g}, S = {self.model_bytes / 1e9:.3g} GB, B(N*) = "
                    f"{self.link.bandwidth_GBps:g} GB/s, C = {self.collectives}, t_N = NCCL's "
                    "time of one collective over N devices)")
        return (f"c0 + c*G/N = k*S/B + A*alpha*N  ->  N* = {self.formula_devices:.3g}  (c0 = "
                f"{self.hide_fixed_s * 1e3:.3g} ms, c = {self.hide_s_per_sample * 1e3:.3g} ms, "
                f"G = {self.global_batch}, k = "
                f"{self.comm_factor:g}, S = {self.model_bytes / 1e9:.3g} GB, B = "
                f"{self.link.bandwidth_GBps:g} GB/s, A = {self.alpha_terms}, alpha = "
                f"{self.link.latency_us:g} us)")


def hide_cost_s(workload: Workload, cluster: Cluster, strategy: str,
                precision: str = "mixed") -> tuple[float, float]:
    """(c0, c): the compute that communication overlaps, c0 + c*batch seconds (backward for
    DDP, forward + backward for ZeRO-3), as the line through batches 1024 and 2048."""
    dev, dt = cluster.device, precision_dtype(precision)
    terms = get_strategy(strategy).crossover_terms(workload, dt)
    forward = terms is not None and terms.forward_covered

    def cover(batch: int) -> float:
        bwd = sum(backward_time_s(layer, batch, dev, dt, workload.dtype)
                  for layer in workload.layers)
        fwd = sum(forward_time_s(layer, batch, dev, dt, workload.dtype)
                  for layer in workload.layers)
        return bwd + (fwd if forward else 0.0)

    c = (cover(2048) - cover(1024)) / 1024
    return max(0.0, cover(1024) - 1024 * c), c


def crossover(workload: Workload, cluster: Cluster, strategy: StrategyName,
              global_batch: Samples, *, precision: PlannerPrecision = DEFAULT_PRECISION,
              n_devices: DeviceCounts = POWERS_OF_TWO) -> Crossover:
    """Strong scaling of a fixed global batch: the compute per device c*G/N shrinks while
    each step still moves k model-sized tensors (k*S/B) and pays A*(N-1) latencies. The
    formula's N* sits next to the first simulated count whose comm time >= its cover.
    S is counted in the compute dtype; under "torch_amp" (the planner's default for FSDP:
    MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)) the gradients are
    reduce-scattered in fp32, twice a bf16 model size: k = 2 + 2 = 4 (with FSDP2's default
    reduce_dtype=None, "torch_amp_bf16_reduce", they travel in bf16: k = 3)."""
    require_workload(workload)  # a layer that computes
    if workload.n_params == 0:
        raise ValueError(f"workload={shown(workload)} has no parameters; allowed: a workload "
                         "with parameters to communicate")
    if all(global_batch % n for n in n_devices):
        raise ValueError(f"global_batch={global_batch} splits over none of n_devices="
                         f"{list(n_devices)}; allowed: a multiple of some device count")
    able = [n for n in names() if get_strategy(n).crossover_terms(workload, "bf16") is not None]
    require_choice("strategy", strategy, able)
    precision = resolve_precision(strategy, precision)
    base = base_precision(precision)
    dt = precision_dtype(base)
    terms = {n: get_strategy(n).crossover_terms(workload, dt) for n in names()}
    c0, c = hide_cost_s(workload, cluster, strategy, base)
    term = terms[strategy]
    assert term is not None  # checked above
    k, a = term.model_transfers, term.alpha_terms
    if precision == "torch_amp":  # reduce_dtype=fp32: the reduce-scatter travels in fp32
        k += 1.0
    model = workload.n_params * DTYPE_BYTES[dt]
    topology = uses_nccl(cluster, group_shape(cluster))
    if topology:  # GPU links: the costs the strategies pay (NCCL's model), N* by search
        found = topology_crossover(c, global_batch, k, model, term, cluster, c0)
        if found is None:
            raise ValueError(f"cluster={shown(cluster)}: the compute hides the communication "
                             f"at every device count up to {MAX_NODES} nodes, so there is "
                             "no crossover; allowed: a workload and batch that cross over")
        n_star, link = found
    else:  # generic links: the closed form, B and alpha of the group's achieved ring link
        link = group_link(cluster, group_shape(cluster, min(cluster.world_size,
                                                            cluster.devices_per_node)))
        n_star = _solve_for(cluster, c, global_batch, k, model, a, link, c0)
        if n_star > cluster.devices_per_node:  # beyond one node: min(intra, the node's NICs)
            big = cluster.with_devices(cluster.devices_per_node * 2)
            link = group_link(big, group_shape(big))
            n_star = max(float(cluster.devices_per_node),
                          _solve_for(cluster, c, global_batch, k, model, a, link, c0))
    simulated = None
    for p in scaling_curve(workload, cluster, strategy, global_batch, mode="strong",
                           n_devices=n_devices, precision=precision):
        cover_s = p.compute_s - _uncovered_s(workload, cluster, term.forward_covered, p,
                                             base)
        if p.n_devices > 1 and p.hidden_comm_s + p.exposed_comm_s >= cover_s:
            simulated = p.n_devices
            break
    label = get_strategy(strategy).label
    return Crossover(strategy, label, global_batch, c, c0, k, model, a, link, n_star, simulated,
                     topology, term.collectives)


def _solve_for(cluster: Cluster, *args: Any) -> float:
    """`solve_crossover` for `crossover`: no crossover is the cluster's doing (no latency)."""
    n_star = solve_crossover(*args)
    if n_star is None:
        raise ValueError(f"cluster={shown(cluster)} has links without latency and the compute "
                         "hides the whole transfer at every device count, so there is no "
                         "crossover; allowed: links with latency_us > 0")
    return n_star


def _uncovered_s(workload: Workload, cluster: Cluster, forward_covered: bool, p: PlanResult,
                 precision: str) -> float:
    """Compute that communication cannot overlap: optimizer, and forward unless covered."""
    dev, dt = cluster.device, precision_dtype(precision)
    fwd = sum(forward_time_s(layer, p.batch_per_device, dev, dt, workload.dtype)
              for layer in workload.layers)
    bwd = sum(backward_time_s(layer, p.batch_per_device, dev, dt, workload.dtype)
              for layer in workload.layers)
    opt = max(0.0, p.compute_s - fwd - bwd)
    return opt + (0.0 if forward_covered else fwd)


# --- the strategies side by side -----------------------------------------------------------

def summary_table(workload: Workload, cluster: Cluster, n_devices: Devices | None = None,
                  global_batch: Samples | None = None, *,
                  precision: PlannerPrecision = DEFAULT_PRECISION,
                  strategies: Annotated[Sequence[str], Each(OneOf(names))] | None = None
                  ) -> list[dict[str, object]]:
    """One row per strategy (default: every registered one) with every number simulated for
    `workload` on `cluster`: traffic and memory per device, step time, throughput (defaults:
    one node, 8 per device; a strategy limited to fewer devices gets their share of it)."""
    n = cluster.devices_per_node if n_devices is None else n_devices
    g = 8 * n if global_batch is None else global_batch
    chosen = names() if strategies is None else strategies
    rows: list[dict[str, object]] = []
    for name in chosen:
        s = get_strategy(name)
        ns = n if s.max_devices is None else min(n, s.max_devices)
        gs = g if ns == n else g // n * ns
        r = plan(workload, cluster, name, ns, max(gs, 1), precision=precision)
        where = s.placement
        rows.append({
            "strategy": s.label, "devices": ns, "replicated": where.replicated,
            "sharded": where.sharded,
            "traffic_GB_per_device": round(r.traffic_bytes_per_device / 1e9, 3),
            "memory_GiB_per_device": round(max(r.peak_bytes) / 1024**3, 2),
            "fits": r.fits, "step_ms": round(r.step_s * 1e3, 2),
            "samples_per_s": round(r.samples_per_s, 1),
            "exposed_comm_ms": round(r.exposed_comm_s * 1e3, 2), "use_when": where.use_when,
        })
    return rows
