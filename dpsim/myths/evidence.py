"""Evidence for the myths lab: numbers measured here or simulated by the chapter modules.

`Lab` runs each costly thing once (one real DDP launch, one GIL measurement, the
simulations) and `gather(number, lab)` returns the flat dict of numbers one claim is judged
on. No verdicts here: `dpsim.myths.judge` turns these numbers into checks and verdicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpsim.collectives.cost import bytes_sent_per_rank
from dpsim.hardware import CLUSTERS, Cluster
from dpsim.memory import model_state_bytes, zero_bytes_per_device, zero_sharded_fraction
from dpsim.planner import plan
from dpsim.strategies import dp, fsdp
from dpsim.trace import Trace
from dpsim.workload import Workload, get_workload

NODE = CLUSTERS["h100-node"]  # 8 x H100 over NVLink
PCIE = CLUSTERS["pcie-4gpu"]  # 4 x A100 over PCIe


class Lab:
    """Runs every measurement and simulation at most once per lab."""

    def __init__(self, world_size: int = 2, measure: bool = True, timeout_s: float = 120.0):
        self.world_size = world_size
        self.measure = measure  # False: skip the real multi-process run (its claims say so)
        self.timeout_s = timeout_s
        self._cache: dict[str, Any] = {}

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def ranks(self) -> list[dict[str, Any]] | None:
        """Every rank's findings from one real DDP run (gloo on CPU), or None if skipped."""
        if not self.measure:
            return None

        def run() -> list[dict[str, Any]]:
            from dpsim.runtime.launch import launch
            from dpsim.runtime.myths_lab import ddp_facts_rank

            return launch(ddp_facts_rank, self.world_size, backend="gloo",
                          timeout_s=self.timeout_s)

        result: list[dict[str, Any]] = self._once("ranks", run)
        return result

    def source(self) -> dict[str, Any]:
        """What torch's DataParallel and DDP sources contain."""
        from dpsim.runtime.myths_lab import torch_source_facts

        facts: dict[str, Any] = self._once("source", torch_source_facts)
        return facts

    def workload(self, name: str) -> Workload:
        """A preset workload, built once."""
        w: Workload = self._once(f"w:{name}", lambda: get_workload(name))
        return w

    def dp_trace(self, model: str, cluster: Cluster = PCIE, n: int = 4, batch: int = 64
                 ) -> Trace:
        """A simulated DataParallel step."""
        key = f"dp:{model}:{cluster.name}:{n}:{batch}"
        tr: Trace = self._once(key, lambda: dp.simulate(self.workload(model), cluster,
                                                         dp.DPConfig(n_devices=n,
                                                                     batch_size=batch)))
        return tr


def _dp_reenacted(n_out: int, n_devices: int = 4, batch: int = 128) -> Any:
    from dpsim.runtime.data import classification
    from dpsim.runtime.dp_reenact import reenact_step
    from dpsim.runtime.models import mlp

    x, y = classification(batch, 32, n_out, seed=0).tensors
    return reenact_step(mlp(32, 64, 2, n_out, seed=0), x, y, n_devices)


def e01(lab: Lab) -> dict[str, Any]:
    """DP splits the batch it is given; DDP's batch_size is per process."""
    ranks = lab.ranks()
    return {"dp_batch": 128, "dp_devices": 4, "dp_chunks": _dp_reenacted(10).chunk_sizes,
            "ddp_batch_size_arg": 8, "ddp_world_size": lab.world_size,
            "ddp_samples_per_rank": [r["samples_per_rank"] for r in ranks] if ranks else None}


def e02(lab: Lab) -> dict[str, Any]:
    """torch's source, and who does what in a simulated DP step."""
    src, tr = lab.source(), lab.dp_trace("resnet50")
    return {"threads": src["parallel_apply_starts_threads"],
            "multiprocessing": src["dp_uses_multiprocessing"],
            "main_thread_devices": sorted({e.device for e in tr.events if e.stream == "main"}),
            "loss_devices": sorted({e.device for e in tr.events if e.kind == "loss"}),
            "python_ms_per_thread": [1e3 * tr.busy_s(d, "python") for d in tr.devices]}


def e04(lab: Lab) -> dict[str, Any]:
    """Peak memory and busy time per device, simulated for two output sizes; measured too."""
    out: dict[str, Any] = {}
    for model in ("gpt2-124m", "resnet50"):
        tr = lab.dp_trace(model)
        out[f"{model}_peak_GiB"] = [b / 1024**3 for b in dp.step_result(tr).peak_bytes]
        out[f"{model}_imbalance"] = dp.summary(tr).imbalance
        out[f"{model}_busy_ms"] = [1e3 * sum(e.duration_s for e in tr.events
                                             if e.device == d and e.stream != "python")
                                   for d in tr.devices]
    for n_out in (10, 10_000):
        mtr = _dp_reenacted(n_out).trace
        peaks = [mtr.peak_memory(d) for d in range(4)]
        out[f"measured_{n_out}_outputs_imbalance"] = peaks[0] / max(peaks[1:])
    return out


def e05(lab: Lab) -> dict[str, Any]:
    """Phases of a simulated DP step, and where each phase's copies go."""
    tr = lab.dp_trace("resnet50")
    phases = dp.summary(tr).phases
    opt_start = phases["optimizer"][0]
    return {"phases_ms": {k: [1e3 * v[0], 1e3 * v[1]] for k, v in phases.items()},
            "reduce_target_device": sorted({e.device for e in tr.events
                                            if e.kind == "reduce" and e.nbytes == 0}),
            "optimizer_devices": sorted({e.device for e in tr.events if e.kind == "optimizer"}),
            "copies_after_update": sum(1 for e in tr.events
                                       if e.stream == "comm" and e.start_s >= opt_start),
            "replicate_every_forward": lab.source()["dp_forward_replicates_every_call"]}


def e06(lab: Lab) -> dict[str, Any]:
    """Python work in 2 threads vs 2 processes: simulated by dpsim.gil, measured (timings: a
    busy machine blurs them), and the GIL bound by Python share, predicted."""
    from dpsim.gil import predict_speedup
    from dpsim.runtime.gil_measure import measure_scaling

    if not lab.measure:
        thr = proc = None
    else:
        thr = measure_scaling("python", (1, 2), "threads", work_s=0.04, trials=2).speedups[-1]
        proc = measure_scaling("python", (1, 2), "processes", work_s=0.04,
                               trials=2).speedups[-1]
    from dpsim.gil import GILConfig, simulate

    return {"simulated_threads_speedup_2_python": simulate(GILConfig(2, 0.05, 1.0)).speedup,
            "threads_speedup_2": thr, "processes_speedup_2": proc,
            "predicted_threads_speedup_4_small_ops": predict_speedup(0.9, 4),
            "predicted_threads_speedup_4_big_matmuls": predict_speedup(0.05, 4)}


def e_ranks(lab: Lab) -> dict[str, Any]:
    """The real DDP run (claims 7, 8, 9, 12, 18), plus dpsim's bucket prediction."""
    from dpsim.runtime.myths_lab import HIDDEN, N_LAYERS, predicted_buckets

    ranks = lab.ranks()
    n = 8
    return {"ranks": ranks, "predicted_bucket_bytes": predicted_buckets(),
            "model_numel": N_LAYERS * (HIDDEN * HIDDEN + HIDDEN),
            "default_bucket_cap_mb": lab.source()["ddp_default_bucket_cap_mb"],
            "ring_sent_bytes": bytes_sent_per_rank("all_reduce", 1 << 20, n),
            "reduce_then_broadcast_sent_bytes": [
                a + b for a, b in zip(bytes_sent_per_rank("reduce", 1 << 20, n),
                                      bytes_sent_per_rank("broadcast", 1 << 20, n),
                                      strict=True)]}


def e10(lab: Lab) -> dict[str, Any]:
    """Simulated step time of DP and DDP, same global batch, per model and node."""
    rows = []
    for model in ("resnet50", "gpt2-124m"):
        for cluster, n in ((PCIE, 4), (NODE, 8)):
            w = lab.workload(model)
            t_dp = plan(w, cluster, "dp", n, 8 * n).step_s
            t_ddp = plan(w, cluster, "ddp", n, 8 * n).step_s
            rows.append({"regime": f"{model}, {n} x {cluster.device.name}",
                         "dp_ms": 1e3 * t_dp, "ddp_ms": 1e3 * t_ddp})
    return {"rows": rows}


def e11(lab: Lab) -> dict[str, Any]:
    """Parameters and peak per device under DP and DDP (simulated)."""
    w = lab.workload("gpt2-124m")
    tr = lab.dp_trace("gpt2-124m")
    ddp_params = model_state_bytes(w.n_params, w.n_param_tensors, dtype="fp32").parameters
    return {"dp_params_GiB": [tr.memory_at_peak(d).get("parameters", 0) / 1024**3
                              for d in tr.devices],
            "ddp_params_GiB": ddp_params / 1024**3,
            "dp_peak_GiB": [b / 1024**3 for b in dp.step_result(tr).peak_bytes],
            "ddp_peak_GiB": max(plan(w, PCIE, "ddp", 4, 64, precision="fp32").peak_bytes)
            / 1024**3}


def e14(lab: Lab) -> dict[str, Any]:
    """Collectives of a simulated ZeRO-3 step and what each device keeps."""
    w = lab.workload("gpt2-124m")
    tr = fsdp.simulate(w, NODE, fsdp.FSDPConfig(batch_size=4, stage=3))
    first_bwd = min(e.start_s for e in tr.events if e.kind == "backward")
    return {"units": len(w.layers),
            "all_gather_forward": sum(1 for e in tr.events
                                      if e.kind == "all_gather" and e.start_s < first_bwd),
            "all_gather_backward": sum(1 for e in tr.events
                                       if e.kind == "all_gather" and e.start_s >= first_bwd),
            "reduce_scatter": sum(1 for e in tr.events if e.kind == "reduce_scatter"),
            "all_reduce": sum(1 for e in tr.events if e.kind == "all_reduce"),
            "kept_fraction": list(zero_sharded_fraction(3, 8))}


def e15(lab: Lab) -> dict[str, Any]:
    """Model states per device and traffic per step, DDP vs ZeRO-3, 7B on 8 devices."""
    w = lab.workload("llama-7b")
    return {"ddp_GiB": zero_bytes_per_device(w.n_params, 8, 0).model_states / 1024**3,
            "fsdp_GiB": zero_bytes_per_device(w.n_params, 8, 3).model_states / 1024**3,
            "ddp_traffic_GB": fsdp.communication_bytes_per_step(w.n_params, 8, 0) / 1e9,
            "fsdp_traffic_GB": fsdp.communication_bytes_per_step(w.n_params, 8, 3) / 1e9}


def e16(lab: Lab) -> dict[str, Any]:
    """One line runs here; torch's docs; simulated efficiency of DP and DDP in one node."""
    from dpsim.runtime.myths_lab import dp_one_line_runs

    w = lab.workload("gpt2-124m")
    counts = (1, 2, 4, 8)
    return {"one_line_runs": dp_one_line_runs(),
            "docs_recommend_ddp": lab.source()["dp_docs_recommend_ddp"],
            "devices": list(counts),
            "dp_efficiency": [plan(w, NODE, "dp", n, 8 * n).scaling_efficiency for n in counts],
            "ddp_efficiency": [plan(w, NODE, "ddp", n, 8 * n).scaling_efficiency
                               for n in counts]}


def e17(lab: Lab) -> dict[str, Any]:
    """Whether this machine can test NCCL with two processes on one GPU."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"cuda_gpus": gpus, "measured": False}


GATHER: dict[int, Callable[[Lab], dict[str, Any]]] = {
    1: e01, 2: e02, 3: e02, 4: e04, 5: e05, 6: e06, 7: e_ranks, 8: e_ranks, 9: e_ranks,
    10: e10, 11: e11, 12: e_ranks, 13: lambda lab: lab.source(), 14: e14, 15: e15, 16: e16,
    17: e17, 18: e_ranks,
}


def gather(number: int, lab: Lab) -> dict[str, Any]:
    """The evidence dict for claim `number` (1..18)."""
    from dpsim.validation import require_choice

    require_choice("number", number, GATHER)
    return GATHER[number](lab)
