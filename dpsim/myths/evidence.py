"""Evidence for the myths lab: numbers measured here, re-enacted here, read from torch's
source, or simulated by dpsim (published numbers live in `dpsim.myths.published`).

`Lab` runs each costly thing once (one real launch for DDP and FSDP2, one timed GIL
series, the simulations) and `gather(number, lab)` returns the numbers one claim is judged
on: one TypedDict per piece of evidence (`BatchSplit`, ..., `Evidence` is any of them; the
real runs' own pieces, `RankFacts`, `SourceFacts`, ..., are defined where they are made, in
`dpsim.labs.ch08_myths.myths_lab`). The keys say the kind: `reenacted_*`, `sim_*` / model
names, and the real runs' `ranks` / `fsdp`. No verdicts here: `dpsim.myths.claims` turns
these numbers into checks labelled by kind, `dpsim.myths.judge` into verdicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict

from dpsim.sim import (
    CLUSTERS,
    Cluster,
    DPConfig,
    FSDPConfig,
    Trace,
    Workload,
    bytes_sent_per_rank,
    communication_bytes_per_step,
    dp_summary,
    get_workload,
    model_state_bytes,
    plan,
    simulate,
    step_result,
    zero_bytes_per_device,
)

if TYPE_CHECKING:
    from dpsim.labs.ch08_myths.myths_lab import GILTimings, NCCLRun, RankFacts, SourceFacts

NODE = CLUSTERS["h100-node"]  # 8 x H100 over NVLink
PCIE = CLUSTERS["pcie-4gpu"]  # 4 x A100 over PCIe
REENACTED_OUTPUTS = (10, 10_000)  # DataParallel re-enacted with these output sizes
DP_PEAK_MODELS = ("gpt2-124m", "resnet50")  # DataParallel simulated on 4 A100 for these


class FSDPFacts(TypedDict):
    """What the ranks' FSDP2 step kept and did, all ranks together (`Lab.fsdp`)."""

    world_size: int
    kept_fraction: list[float]  # per rank
    blocks: list[str]
    blocks_gathered_twice: bool  # on every rank
    blocks_reduced_once: bool


class BatchSplit(TypedDict):
    """Claim 1: DP's chunks of its batch (re-enacted); DDP's samples per rank (measured)."""

    dp_batch: int
    dp_devices: int
    dp_chunks: list[int]
    ddp_batch_size_arg: int
    ddp_world_size: int
    ddp_samples_per_rank: list[int] | None  # None: the real run was skipped


class DPThreads(TypedDict):
    """Claims 2 and 3: how DataParallel runs (torch's source, re-enacted, simulated)."""

    threads: bool
    multiprocessing: bool
    output_device_defaults_first: bool
    reenacted_loss_devices: list[int]
    main_thread_devices: list[int]
    loss_devices: list[int]


class DPDeviceZero(TypedDict):
    """Claim 4: what device 0 does and holds beyond the others."""

    reenacted_device0_only_kinds: list[str]
    reenacted_peak_bytes: dict[int, list[int]]  # output size -> per device
    reenacted_imbalance: dict[int, float]  # output size -> device 0 / the largest other
    gpu_peak_bytes: list[int] | None
    gpu_why: str
    sim_peak_GiB: dict[str, list[float]]  # model -> per device
    sim_imbalance: dict[str, float]


class DPUpdate(TypedDict):
    """Claim 5: where DataParallel reduces, updates and copies."""

    phases_ms: dict[str, list[float]]  # simulated phase -> [start, end]
    replicate_backward_reduces: bool
    reduce_target_device: list[int]
    optimizer_devices: list[int]
    copies_after_update: int
    sim_copies_after_update: int
    replicate_every_forward: bool


class GILEvidence(TypedDict):
    """Claim 6: DDP's processes, threads vs processes timed, the GIL model."""

    ddp_rank_pids: list[int] | None
    threads_speedups: list[float]
    processes_over_threads: list[float]
    threads_speedup_2: float | None
    processes_speedup_2: float | None
    simulated_threads_speedup_2_python: float
    predicted_threads_speedup_4_small_ops: float
    predicted_threads_speedup_4_big_matmuls: float


class DDPRun(TypedDict):
    """Claims 7, 8, 9, 12 and 18: the real DDP run, torch's buckets, dpsim's prediction."""

    ranks: list[RankFacts] | None
    predicted_bucket_bytes: list[int]
    torch_rebuilt_bucket_count: int
    model_numel: int
    default_bucket_cap_mb: float
    ring_sent_bytes: list[int]
    reduce_then_broadcast_sent_bytes: list[int]


class StepTimes(TypedDict):
    """One simulated DP-vs-DDP step of `DPvsDDP`."""

    regime: str
    dp_ms: float
    ddp_ms: float


class DPvsDDP(TypedDict):
    """Claim 10: simulated step times, and why no GPU timing is made here."""

    rows: list[StepTimes]
    gpu_why: str


class DPMemory(TypedDict):
    """Claim 11: DP's peaks and replicas (re-enacted, on GPUs), DDP's ranks, the model."""

    reenacted_peak_bytes: list[int]
    gpu_peak_bytes: list[int] | None
    gpu_why: str
    reenacted_full_replicas: bool
    ranks: list[RankFacts] | None
    model_numel: int
    dp_params_GiB: list[float]
    ddp_params_GiB: float


class FSDPShards(TypedDict):
    """Claim 14: the measured FSDP2 step; the simulated ZeRO-3 step's collectives."""

    fsdp: FSDPFacts | None
    sim_all_gather: int
    sim_all_reduce: int


class FSDPCost(TypedDict):
    """Claim 15: the measured FSDP2 shards; DDP vs ZeRO-3 for 7B on 8 devices (model)."""

    fsdp: FSDPFacts | None
    ddp_GiB: float
    fsdp_GiB: float
    ddp_traffic_GB: float
    fsdp_traffic_GB: float


class DPAdvice(TypedDict):
    """Claim 16: one line runs here; torch's docs; simulated efficiency in one node."""

    one_line_runs: bool
    docs_recommend_ddp: bool
    devices: list[int]
    dp_efficiency: list[float]
    ddp_efficiency: list[float]


class NCCLOneGPU(TypedDict):
    """Claim 17: two NCCL ranks on one GPU."""

    nccl_run: NCCLRun


# what `gather` returns: one of these (SourceFacts is claim 13's, torch's source alone)
Evidence: TypeAlias = ("BatchSplit | DPThreads | DPDeviceZero | DPUpdate | GILEvidence | DDPRun"
                       " | DPvsDDP | DPMemory | SourceFacts | FSDPShards | FSDPCost | DPAdvice"
                       " | NCCLOneGPU")


class Lab:
    """Runs every measurement and simulation at most once per lab."""

    def __init__(self, world_size: int = 2, measure: bool = True, timeout_s: float = 180.0,
                 gil_repeats: int = 5):
        self.world_size = world_size
        self.measure = measure  # False: skip the real runs (their checks say "untested")
        self.timeout_s = timeout_s
        self.gil_repeats = gil_repeats
        self._cache: dict[str, Any] = {}

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def ranks(self) -> list[RankFacts] | None:
        """Every rank's findings from one real launch (gloo on CPU), or None if skipped."""
        if not self.measure:
            return None

        def run() -> list[RankFacts]:
            from dpsim.labs.ch08_myths.myths_lab import ddp_facts_rank
            from dpsim.runtime.launch import launch

            return launch(ddp_facts_rank, self.world_size, backend="gloo",
                          timeout_s=self.timeout_s)

        result: list[RankFacts] = self._once("ranks", run)
        return result

    def fsdp(self) -> FSDPFacts | None:
        """What the ranks' FSDP2 step kept and did, all ranks together (None if skipped)."""
        ranks = self.ranks()
        if not ranks:
            return None
        facts = [r["fsdp"] for r in ranks]
        return {"world_size": len(ranks), "kept_fraction": [f["kept_fraction"] for f in facts],
                "blocks": facts[0]["blocks"],
                "blocks_gathered_twice": all(f["blocks_gathered_twice"] for f in facts),
                "blocks_reduced_once": all(f["blocks_reduced_once"] for f in facts)}

    def gil(self) -> GILTimings:
        """Timed threads vs processes, `gil_repeats` times (empty lists if skipped)."""
        if not self.measure:
            return {"threads_speedups": [], "processes_over_threads": []}
        from dpsim.labs.ch08_myths.myths_lab import threads_vs_processes

        facts: GILTimings = self._once(
            "gil", lambda: threads_vs_processes(self.gil_repeats))
        return facts

    def gpu_peaks(self) -> tuple[list[int] | None, str]:
        """Peak bytes per CUDA device of a real DataParallel step, or (None, why not)."""
        from dpsim.labs.ch08_myths.myths_lab import dp_gpu_peaks

        got: tuple[list[int] | None, str] = self._once("gpu", dp_gpu_peaks)
        return got

    def source(self) -> SourceFacts:
        """What torch's DataParallel and DDP sources contain."""
        from dpsim.labs.ch08_myths.myths_lab import torch_source_facts

        facts: SourceFacts = self._once("source", torch_source_facts)
        return facts

    def workload(self, name: str) -> Workload:
        """A preset workload, built once."""
        w: Workload = self._once(f"w:{name}", lambda: get_workload(name))
        return w

    def dp_trace(self, model: str, cluster: Cluster = PCIE, n: int = 4, batch: int = 64
                 ) -> Trace:
        """A simulated DataParallel step."""
        key = f"dp:{model}:{cluster.name}:{n}:{batch}"
        tr: Trace = self._once(key, lambda: simulate(self.workload(model), cluster,
                                                         DPConfig(n_devices=n,
                                                                     batch_size=batch)))
        return tr

    def reenacted(self, n_out: int) -> Any:
        """DataParallel re-enacted on 4 stand-in CPU devices, with an SGD step."""
        return self._once(f"re:{n_out}", lambda: _dp_reenacted(n_out))


def _dp_reenacted(n_out: int, n_devices: int = 4, batch: int = 128) -> Any:
    import torch

    from dpsim.labs.ch03_data_parallel.dp_reenact import reenact_step
    from dpsim.runtime.data import classification
    from dpsim.runtime.models import mlp

    x, y = classification(batch, 32, n_out, seed=0).tensors
    model = mlp(32, 64, 2, n_out, seed=0)
    return reenact_step(model, x, y, n_devices,
                        optimizer=torch.optim.SGD(model.parameters(), lr=0.1))


def batch_split(lab: Lab) -> BatchSplit:
    """DP splits the batch it is given (re-enacted); DDP's batch_size is per process."""
    ranks = lab.ranks()
    return {"dp_batch": 128, "dp_devices": 4, "dp_chunks": lab.reenacted(10).chunk_sizes,
            "ddp_batch_size_arg": 8, "ddp_world_size": lab.world_size,
            "ddp_samples_per_rank": [r["samples_per_rank"] for r in ranks] if ranks else None}


def dp_threads(lab: Lab) -> DPThreads:
    """torch's source, the re-enacted step, and who does what in a simulated DP step."""
    src, tr = lab.source(), lab.dp_trace("resnet50")
    re_tr = lab.reenacted(10).trace
    return {"threads": src["parallel_apply_starts_threads"],
            "multiprocessing": src["dp_uses_multiprocessing"],
            "output_device_defaults_first": src["dp_output_device_defaults_first"],
            "reenacted_loss_devices": sorted({e.device for e in re_tr.events
                                              if e.kind == "loss"}),
            "main_thread_devices": sorted({e.device for e in tr.events if e.stream == "main"}),
            "loss_devices": sorted({e.device for e in tr.events if e.kind == "loss"})}


def _only_on_device0(tr: Trace) -> list[str]:
    kinds = {d: {e.kind for e in tr.events if e.device == d and e.stream == "compute"}
             for d in tr.devices}
    others = set().union(*(k for d, k in kinds.items() if d != 0))
    return sorted(kinds[0] - others)


def dp_device_zero(lab: Lab) -> DPDeviceZero:
    """Peaks and device-0-only work: re-enacted for two output sizes, simulated, on GPUs."""
    peaks = {n_out: [lab.reenacted(n_out).trace.peak_memory(d) for d in range(4)]
             for n_out in REENACTED_OUTPUTS}
    gpu_peak_bytes, gpu_why = lab.gpu_peaks()
    traces = {model: lab.dp_trace(model) for model in DP_PEAK_MODELS}
    return {"reenacted_device0_only_kinds": _only_on_device0(lab.reenacted(10).trace),
            "reenacted_peak_bytes": peaks,
            "reenacted_imbalance": {n: p[0] / max(p[1:]) for n, p in peaks.items()},
            "gpu_peak_bytes": gpu_peak_bytes, "gpu_why": gpu_why,
            "sim_peak_GiB": {m: [b / 1024**3 for b in step_result(tr).peak_bytes]
                             for m, tr in traces.items()},
            "sim_imbalance": {m: dp_summary(tr).imbalance for m, tr in traces.items()}}


def dp_update(lab: Lab) -> DPUpdate:
    """Where a re-enacted step reduces, updates and copies; torch's source; the model."""
    re_tr = lab.reenacted(10).trace
    opt_start = min(e.start_s for e in re_tr.events if e.kind == "optimizer")
    tr = lab.dp_trace("resnet50")
    phases = dp_summary(tr).phases
    return {"phases_ms": {k: [1e3 * v[0], 1e3 * v[1]] for k, v in phases.items()},
            "replicate_backward_reduces": lab.source()["replicate_backward_reduces"],
            "reduce_target_device": sorted({e.device for e in re_tr.events
                                            if e.kind == "reduce" and e.nbytes == 0}),
            "optimizer_devices": sorted({e.device for e in re_tr.events
                                         if e.kind == "optimizer"}),
            "copies_after_update": sum(1 for e in re_tr.events
                                       if e.stream == "comm" and e.start_s >= opt_start),
            "sim_copies_after_update": sum(1 for e in tr.events if e.stream == "comm"
                                           and e.start_s >= phases["optimizer"][0]),
            "replicate_every_forward": lab.source()["dp_forward_replicates_every_call"]}


def gil_evidence(lab: Lab) -> GILEvidence:
    """DDP ranks' process ids; threads vs processes timed with repeats; the GIL model."""
    from dpsim.sim import GILConfig, predict_speedup, simulate_gil

    ranks = lab.ranks()
    gil = lab.gil()

    def median(xs: list[float]) -> float | None:
        return sorted(xs)[len(xs) // 2] if xs else None

    return {"ddp_rank_pids": [r["pid"] for r in ranks] if ranks else None,
            "threads_speedups": gil["threads_speedups"],
            "processes_over_threads": gil["processes_over_threads"],
            "threads_speedup_2": median(gil["threads_speedups"]),
            "processes_speedup_2": median([t * r for t, r in zip(
                gil["threads_speedups"], gil["processes_over_threads"], strict=True)]),
            "simulated_threads_speedup_2_python": simulate_gil(GILConfig(2, 0.05, 1.0)).speedup,
            "predicted_threads_speedup_4_small_ops": predict_speedup(0.9, 4),
            "predicted_threads_speedup_4_big_matmuls": predict_speedup(0.05, 4)}


def ddp_run(lab: Lab) -> DDPRun:
    """The real DDP run (claims 7, 8, 9, 12, 18), torch's buckets, dpsim's prediction."""
    from dpsim.labs.ch08_myths.myths_lab import (
        HIDDEN,
        N_LAYERS,
        predicted_buckets,
        torch_bucket_count,
    )

    n = 8
    return {"ranks": lab.ranks(), "predicted_bucket_bytes": predicted_buckets(),
            "torch_rebuilt_bucket_count": torch_bucket_count(),
            "model_numel": N_LAYERS * (HIDDEN * HIDDEN + HIDDEN),
            "default_bucket_cap_mb": lab.source()["ddp_default_bucket_cap_mb"],
            "ring_sent_bytes": bytes_sent_per_rank("all_reduce", 1 << 20, n),
            "reduce_then_broadcast_sent_bytes": [
                a + b for a, b in zip(bytes_sent_per_rank("reduce", 1 << 20, n),
                                      bytes_sent_per_rank("broadcast", 1 << 20, n),
                                      strict=True)]}


def dp_vs_ddp(lab: Lab) -> DPvsDDP:
    """Simulated step time of DP and DDP, same global batch, per model and node."""
    rows: list[StepTimes] = []
    for model in ("resnet50", "gpt2-124m"):
        for cluster, n in ((PCIE, 4), (NODE, 8)):
            w = lab.workload(model)
            t_dp = plan(w, cluster, "dp", n, 8 * n).step_s
            t_ddp = plan(w, cluster, "ddp", n, 8 * n).step_s
            rows.append({"regime": f"{model}, {n} x {cluster.device.name}",
                         "dp_ms": 1e3 * t_dp, "ddp_ms": 1e3 * t_ddp})
    return {"rows": rows, "gpu_why": "a DP-vs-DDP timing on GPUs is not part of the lab; "
                                     "the published 2-GPU run stands for it"}


def dp_memory(lab: Lab) -> DPMemory:
    """Re-enacted DP peaks and replicas, the measured DDP ranks, the simulated bytes."""
    from dpsim.labs.ch08_myths.myths_lab import HIDDEN, N_LAYERS

    re_tr = lab.reenacted(10).trace
    pbytes = max(s.nbytes for s in re_tr.memory if s.device == 0 and s.category == "parameters")
    w = lab.workload("gpt2-124m")
    tr = lab.dp_trace("gpt2-124m")
    ddp_params = model_state_bytes(w.n_params, w.n_param_tensors, dtype="fp32").parameters
    gpu_peaks, gpu_why = lab.gpu_peaks()
    return {"reenacted_peak_bytes": [re_tr.peak_memory(d) for d in range(4)],
            "gpu_peak_bytes": gpu_peaks, "gpu_why": gpu_why,
            "reenacted_full_replicas": all(
                max(s.nbytes for s in re_tr.memory if s.device == d
                    and s.category == "parameters") == pbytes for d in range(4)),
            "ranks": lab.ranks(), "model_numel": N_LAYERS * (HIDDEN * HIDDEN + HIDDEN),
            "dp_params_GiB": [tr.memory_at_peak(d).get("parameters", 0) / 1024**3
                              for d in tr.devices],
            "ddp_params_GiB": ddp_params / 1024**3}


def fsdp_shards(lab: Lab) -> FSDPShards:
    """The measured FSDP2 step; the simulated ZeRO-3 step's collectives beside it."""
    tr = simulate(lab.workload("gpt2-124m"), NODE, FSDPConfig(batch_size=4, stage=3))
    return {"fsdp": lab.fsdp(),
            "sim_all_gather": sum(1 for e in tr.events if e.kind == "all_gather"),
            "sim_all_reduce": sum(1 for e in tr.events if e.kind == "all_reduce")}


def fsdp_cost(lab: Lab) -> FSDPCost:
    """The measured FSDP2 shards; model states and traffic, DDP vs ZeRO-3, 7B on 8 (model)."""
    w = lab.workload("llama-7b")
    return {"fsdp": lab.fsdp(),
            "ddp_GiB": zero_bytes_per_device(w.n_params, 8, 0).model_states / 1024**3,
            "fsdp_GiB": zero_bytes_per_device(w.n_params, 8, 3).model_states / 1024**3,
            "ddp_traffic_GB": communication_bytes_per_step(w.n_params, 8, 0) / 1e9,
            "fsdp_traffic_GB": communication_bytes_per_step(w.n_params, 8, 3) / 1e9}


def dp_advice(lab: Lab) -> DPAdvice:
    """One line runs here; torch's docs; simulated efficiency of DP and DDP in one node."""
    from dpsim.labs.ch08_myths.myths_lab import dp_one_line_runs

    w = lab.workload("gpt2-124m")
    counts = (1, 2, 4, 8)
    return {"one_line_runs": dp_one_line_runs(),
            "docs_recommend_ddp": lab.source()["dp_docs_recommend_ddp"],
            "devices": list(counts),
            "dp_efficiency": [plan(w, NODE, "dp", n, 8 * n).scaling_efficiency for n in counts],
            "ddp_efficiency": [plan(w, NODE, "ddp", n, 8 * n).scaling_efficiency
                               for n in counts]}


def nccl_one_gpu(lab: Lab) -> NCCLOneGPU:
    """Two NCCL ranks on one GPU, run inside a timeout when this machine has a GPU."""
    from dpsim.labs.ch08_myths.myths_lab import nccl_two_ranks_one_gpu

    run: NCCLRun = (lab._once("nccl", nccl_two_ranks_one_gpu) if lab.measure
                    else {"ran": False, "outcome": "untested", "detail": "Lab(measure=False)"})
    return {"nccl_run": run}


GATHER: dict[int, Callable[[Lab], Evidence]] = {
    1: batch_split, 2: dp_threads, 3: dp_threads, 4: dp_device_zero, 5: dp_update,
    6: gil_evidence, 7: ddp_run, 8: ddp_run, 9: ddp_run, 10: dp_vs_ddp, 11: dp_memory,
    12: ddp_run, 13: Lab.source, 14: fsdp_shards, 15: fsdp_cost, 16: dp_advice,
    17: nccl_one_gpu, 18: ddp_run,
}


def gather(number: int, lab: Lab) -> Evidence:
    """The evidence for claim `number` (1..18)."""
    from dpsim.sim import require_choice

    require_choice("number", number, GATHER)
    return GATHER[number](lab)
