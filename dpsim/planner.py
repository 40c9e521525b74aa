"""Choosing a strategy: one training step of any strategy on any cluster, in one result.

`plan` wraps the chapter simulators (strategies.single, dp, ddp, fsdp) and reports the
step split into compute, communication hidden behind it and communication exposed,
memory per device with the devices that run out, throughput and scaling efficiency.
`scaling_curve` repeats it from 1 to 1024 devices (strong: fixed global batch; weak:
fixed batch per device), and `crossover` gives the closed form for the number of devices
where communication stops hiding behind computation. Everything is simulated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dpsim.collectives.cost import ring_bytes_per_rank_formula
from dpsim.compute import backward_time_s, forward_time_s, step_compute_s
from dpsim.hardware import Cluster, Link
from dpsim.memory import model_state_bytes
from dpsim.strategies import ddp, dp, fsdp, single
from dpsim.validation import require_choice, require_int
from dpsim.workload import DTYPE_BYTES, Workload

STRATEGIES = ("single", "dp", "ddp", "zero1", "zero2", "fsdp")
LABELS = {"single": "single device", "dp": "DataParallel", "ddp": "DDP",
          "zero1": "FSDP / ZeRO-1", "zero2": "FSDP / ZeRO-2", "fsdp": "FSDP / ZeRO-3"}
PRECISIONS = ("fp32", "mixed")  # fp32 everywhere; bf16 compute with fp32 master and moments
POWERS_OF_TWO = tuple(2**k for k in range(11))  # 1 .. 1024 devices
MODES = ("strong", "weak")


@dataclass(frozen=True)
class PlanResult:
    """One simulated training step of `strategy` on `n_devices` devices (seconds, bytes)."""

    strategy: str
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


def _dtype(precision: str) -> str:
    return "fp32" if precision == "fp32" else "bf16"


def check_batch(strategy: str, n_devices: int, global_batch: int) -> int:
    """Samples per device; ValueError when the global batch does not split evenly."""
    require_choice("strategy", strategy, STRATEGIES)
    require_int("n_devices", n_devices, 1, 1024)
    require_int("global_batch", global_batch, 1, 1 << 24)
    if strategy == "single" and n_devices != 1:
        raise ValueError(f"n_devices={n_devices} with strategy='single'; allowed: 1")
    if strategy == "dp":  # torch.chunk: any batch, but each used device needs a sample
        if global_batch < n_devices:
            raise ValueError(f"global_batch={global_batch} is out of range for DP on "
                             f"{n_devices} devices; allowed >= {n_devices}")
        return math.ceil(global_batch / n_devices)
    if global_batch % n_devices:
        raise ValueError(f"global_batch={global_batch} does not split over n_devices="
                         f"{n_devices}; allowed: a multiple of {n_devices}")
    return global_batch // n_devices


def plan(workload: Workload, cluster: Cluster, strategy: str, n_devices: int,
         global_batch: int, *, precision: str = "mixed", optimizer: str = "adam") -> PlanResult:
    """Simulate one step of `strategy` on `cluster` resized to `n_devices` devices.

    The cluster preset gives the device and the links (nodes fill first; beyond one node
    the inter-node link is used). DP runs one process, so it is limited to one node.
    """
    b = check_batch(strategy, n_devices, global_batch)
    require_choice("precision", precision, PRECISIONS)
    if strategy == "dp":
        require_int("n_devices", n_devices, 1, cluster.devices_per_node)
    sized = cluster.with_devices(n_devices)
    dt = _dtype(precision)
    mixed = precision == "mixed"
    one = step_compute_s(workload, b, sized.device, dt, optimizer)
    mem = sized.device.memory_bytes
    n = n_devices
    if strategy == "single":
        tr = single.simulate(workload, sized.device,
                             single.SingleConfig(b, optimizer, dt, mixed))
        s = tr.meta["step_time_s"]
        return PlanResult(strategy, 1, global_batch, b, s, s, 0.0, 0.0, 0.0,
                          (tr.meta["peak_bytes"],), mem, 0, one)
    if strategy == "ddp":
        tr = ddp.simulate(workload, sized, ddp.DDPConfig(batch_size=b, optimizer=optimizer,
                                                         dtype=dt))
        br = ddp.breakdown(tr)
        grad_bytes = workload.n_params * DTYPE_BYTES[dt]
        states = model_state_bytes(workload.n_params, workload.n_param_tensors, dtype=dt,
                                   optimizer=optimizer, mixed_precision=mixed)
        peak = states.model_states + grad_bytes + workload.activation_bytes(b, dt)  # + buckets
        sent = int(ring_bytes_per_rank_formula(grad_bytes, n))
        return PlanResult(strategy, n, global_batch, b, br.step_s, br.compute_s,
                          br.hidden_comm_s, br.exposed_comm_s, 0.0, (peak,) * n, mem, sent,
                          one)
    if strategy == "dp":
        tr = dp.simulate(workload, sized, dp.DPConfig(n_devices=n, batch_size=global_batch,
                                                      optimizer=optimizer, dtype=dt))
        step = tr.meta["step_time_s"]
        compute = max(tr.busy_s(d, "compute") for d in range(n))
        comm = tr.busy_s(0, "comm")
        exposed = min(comm, max(0.0, step - compute))
        sent = sum(e.nbytes for e in tr.events if e.stream == "comm") // max(n, 1)
        return PlanResult(strategy, n, global_batch, b, step, compute, comm - exposed,
                          exposed, max(0.0, step - compute - exposed),
                          tuple(int(p) for p in tr.meta["peak_bytes"]), mem, int(sent), one)
    stage = {"zero1": 1, "zero2": 2, "fsdp": 3}[strategy]
    tr = fsdp.simulate(workload, sized, fsdp.FSDPConfig(batch_size=b, stage=stage,
                                                        precision=precision,
                                                        optimizer=optimizer))
    t = fsdp.timing_summary(tr)
    return PlanResult(strategy, n, global_batch, b, t["step_s"], t["compute_s"],
                      t["hidden_comm_s"], t["exposed_comm_s"], 0.0,
                      (int(tr.meta["peak_bytes"]),) * n, mem,
                      int(tr.meta["sent_bytes_per_device"]), one)


def scaling_curve(workload: Workload, cluster: Cluster, strategy: str, batch: int, *,
                  mode: str = "strong", n_devices: Sequence[int] = POWERS_OF_TWO,
                  precision: str = "mixed", optimizer: str = "adam") -> list[PlanResult]:
    """`plan` at each device count: strong keeps the global batch `batch`, weak keeps
    `batch` per device. Counts that do not split the global batch are skipped."""
    require_choice("mode", mode, MODES)
    require_choice("strategy", strategy, STRATEGIES)
    out = []
    for n in n_devices:
        require_int("n_devices", n, 1, 1024)
        if strategy == "dp" and n > cluster.devices_per_node:
            continue
        global_batch = batch if mode == "strong" else batch * n
        if mode == "strong" and (global_batch % n or global_batch < n):
            continue
        out.append(plan(workload, cluster, strategy, n, global_batch, precision=precision,
                        optimizer=optimizer))
    if not out:
        raise ValueError(f"batch={batch} splits over none of n_devices={list(n_devices)}; "
                         "allowed: a batch that is a multiple of some device count")
    return out


def efficiencies(curve: Sequence[PlanResult], mode: str = "strong") -> list[float]:
    """Scaling efficiency against the curve's first point: strong t1 / (N tN), weak t1 / tN."""
    require_choice("mode", mode, MODES)
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
    global_batch: int
    hide_s_per_sample: float  # c: compute seconds per sample the communication hides behind
    hide_fixed_s: float  # c0: the part of that compute that does not shrink with the batch
    comm_factor: float  # k: model-sized transfers per step, 2 (all-reduce) or 3 (ZeRO-3)
    model_bytes: int  # S: parameters (= gradients) in the communication dtype
    alpha_terms: int  # A: latencies per step per extra device (2 per bucket; 3 per unit)
    link: Link  # the link (B, alpha) used at the predicted crossover
    formula_devices: float  # N* from the formula
    simulated_devices: int | None  # first count where simulated comm >= its cover; None: never

    @property
    def formula(self) -> str:
        """The formula with its numbers."""
        return (f"c0 + c*G/N = k*S/B + A*alpha*N  ->  N* = {self.formula_devices:.3g}  (c0 = "
                f"{self.hide_fixed_s * 1e3:.3g} ms, c = {self.hide_s_per_sample * 1e3:.3g} ms, "
                f"G = {self.global_batch}, k = "
                f"{self.comm_factor:g}, S = {self.model_bytes / 1e9:.3g} GB, B = "
                f"{self.link.bandwidth_GBps:g} GB/s, A = {self.alpha_terms}, alpha = "
                f"{self.link.latency_us:g} us)")


def crossover_formula(c_s: float, global_batch: int, k: float, model_bytes: int,
                      alpha_terms: int, link: Link, c0_s: float = 0.0) -> float:
    """Solve c0 + c*G/N = k*S/B + A*alpha*N for N (ring collectives, (N-1)/N ~ 1):
    A*alpha*N^2 + (k*S/B - c0)*N - c*G = 0.

    With c0 = 0 and alpha = 0 it is N* = c*G*B/(k*S): the devices at which the compute per
    device, shrinking as 1/N, falls to the fixed time of moving k copies of the model.
    """
    beta_s = k * model_bytes / (link.bandwidth_GBps * 1e9) - c0_s
    a_s = alpha_terms * link.latency_us * 1e-6
    cg = c_s * global_batch
    if a_s == 0:
        return cg / beta_s if beta_s > 0 else math.inf
    return (-beta_s + math.sqrt(beta_s**2 + 4 * a_s * cg)) / (2 * a_s)


def hide_cost_s(workload: Workload, cluster: Cluster, strategy: str,
                precision: str = "mixed") -> tuple[float, float]:
    """(c0, c): the compute that communication overlaps, c0 + c*batch seconds (backward for
    DDP, forward + backward for ZeRO-3), as the line through batches 1024 and 2048."""
    dev, dt = cluster.device, _dtype(precision)

    def cover(batch: int) -> float:
        bwd = sum(backward_time_s(layer, batch, dev, dt, workload.dtype)
                  for layer in workload.layers)
        fwd = sum(forward_time_s(layer, batch, dev, dt, workload.dtype)
                  for layer in workload.layers)
        return bwd + (fwd if strategy == "fsdp" else 0.0)

    c = (cover(2048) - cover(1024)) / 1024
    return max(0.0, cover(1024) - 1024 * c), c


def crossover(workload: Workload, cluster: Cluster, strategy: str, global_batch: int, *,
              precision: str = "mixed",
              n_devices: Sequence[int] = POWERS_OF_TWO) -> Crossover:
    """Strong scaling of a fixed global batch: the compute per device c*G/N shrinks while
    each step still moves k model-sized tensors (k*S/B) and pays A*(N-1) latencies. The
    formula's N* sits next to the first simulated count whose comm time >= its cover."""
    require_choice("strategy", strategy, ("ddp", "fsdp"))
    require_int("global_batch", global_batch, 1, 1 << 24)
    c0, c = hide_cost_s(workload, cluster, strategy, precision)
    dt = _dtype(precision)
    if strategy == "ddp":
        k, a = 2.0, 2 * len(ddp.build_buckets(ddp.grad_tensors(workload, dt)))
    else:
        k, a = 3.0, 3 * len(workload.layers)  # one FSDP unit per layer
    model = workload.n_params * DTYPE_BYTES[dt]
    link = cluster.intra_node
    n_star = crossover_formula(c, global_batch, k, model, a, link, c0)
    if n_star > cluster.devices_per_node:  # beyond one node the slower link decides
        big = cluster.with_devices(cluster.devices_per_node * 2)
        link = big.link_for(big.world_size)
        n_star = max(float(cluster.devices_per_node),
                     crossover_formula(c, global_batch, k, model, a, link, c0))
    simulated = None
    for p in scaling_curve(workload, cluster, strategy, global_batch, mode="strong",
                           n_devices=n_devices, precision=precision):
        cover_s = p.compute_s - _uncovered_s(workload, cluster, strategy, p, precision)
        if p.n_devices > 1 and p.hidden_comm_s + p.exposed_comm_s >= cover_s:
            simulated = p.n_devices
            break
    return Crossover(strategy, global_batch, c, c0, k, model, a, link, n_star, simulated)


def _uncovered_s(workload: Workload, cluster: Cluster, strategy: str, p: PlanResult,
                 precision: str) -> float:
    """Compute that communication cannot overlap: optimizer, and forward for DDP."""
    dev, dt = cluster.device, _dtype(precision)
    fwd = sum(forward_time_s(layer, p.batch_per_device, dev, dt, workload.dtype)
              for layer in workload.layers)
    bwd = sum(backward_time_s(layer, p.batch_per_device, dev, dt, workload.dtype)
              for layer in workload.layers)
    opt = max(0.0, p.compute_s - fwd - bwd)
    return opt + (fwd if strategy == "ddp" else 0.0)


# --- the four strategies side by side -------------------------------------------------------

WHAT = {  # (replicated on every device, sharded across devices, when to use it)
    "single": ("everything", "nothing", "the model and a useful batch fit one device"),
    "dp": ("parameters, gradients, optimizer (re-copied every step)", "the batch",
           "a quick try on 2-4 GPUs of one node; prefer DDP"),
    "ddp": ("parameters, gradients, optimizer", "the batch",
            "the model's states fit one device: the default"),
    "zero1": ("parameters, gradients", "optimizer state, the batch",
              "optimizer state is what does not fit"),
    "zero2": ("parameters", "gradients, optimizer state, the batch",
              "gradients + optimizer state do not fit"),
    "fsdp": ("nothing", "parameters, gradients, optimizer state, the batch",
             "the model's states do not fit one device"),
}


def summary_table(workload: Workload, cluster: Cluster, n_devices: int | None = None,
                  global_batch: int | None = None, *, precision: str = "mixed",
                  strategies: Sequence[str] = STRATEGIES) -> list[dict[str, object]]:
    """One row per strategy with every number simulated for `workload` on `cluster`:
    traffic and memory per device, step time, throughput (defaults: one node, 8 per device)."""
    n = n_devices or cluster.devices_per_node
    g = global_batch or 8 * n
    rows: list[dict[str, object]] = []
    for s in strategies:
        ns = 1 if s == "single" else n
        gs = g // n if s == "single" else g
        r = plan(workload, cluster, s, ns, max(gs, 1), precision=precision)
        rows.append({
            "strategy": LABELS[s], "devices": ns, "replicated": WHAT[s][0],
            "sharded": WHAT[s][1],
            "traffic_GB_per_device": round(r.traffic_bytes_per_device / 1e9, 3),
            "memory_GiB_per_device": round(max(r.peak_bytes) / 1024**3, 2),
            "fits": r.fits, "step_ms": round(r.step_s * 1e3, 2),
            "samples_per_s": round(r.samples_per_s, 1),
            "exposed_comm_ms": round(r.exposed_comm_s * 1e3, 2), "use_when": WHAT[s][2],
        })
    return rows
