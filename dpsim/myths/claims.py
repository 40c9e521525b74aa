"""The claims of the myths lab and the checks that judge them from evidence.

Each entry: the claim as it circulates, where its evidence comes from, and a function
from the evidence dict (see `dpsim.myths.evidence`) to a list of `Check`s. A check is a
sub-statement of the claim, true or false by a comparison of numbers; `core` checks are
what the claim stands on. `dpsim.myths.judge.judge` turns checks into a verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TOL = 1e-5  # float32 agreement between ranks


@dataclass(frozen=True)
class Check:
    """One sub-statement of a claim and whether the evidence supports it."""

    name: str
    holds: bool
    core: bool = True  # False: a detail; the claim stands or falls on the core checks


def _ranks(e: dict[str, Any]) -> list[dict[str, Any]]:
    ranks: list[dict[str, Any]] = e.get("ranks") or []
    return ranks


def _measured(e: dict[str, Any]) -> list[Check]:
    """A claim that needs the real run says so when it was skipped."""
    return [] if _ranks(e) else [Check("the real DDP run was made", False, core=False)]


def c01(e: dict[str, Any]) -> list[Check]:
    chunks, n = e["dp_chunks"], e["dp_devices"]
    checks = [Check("DP splits its batch: devices get batch / N each",
                    sum(chunks) == e["dp_batch"] and chunks == [e["dp_batch"] // n] * n)]
    per_rank = e["ddp_samples_per_rank"]
    if per_rank is None:
        return [*checks, Check("DDP's batch_size is per process (not measured)", False, False)]
    return [*checks,
            Check("DDP: every process gets batch_size samples",
                  all(s == e["ddp_batch_size_arg"] for s in per_rank)),
            Check("DDP: global batch = batch_size x world_size",
                  sum(per_rank) == e["ddp_batch_size_arg"] * e["ddp_world_size"])]


def c02(e: dict[str, Any]) -> list[Check]:
    return [Check("parallel_apply runs one thread per device", bool(e["threads"])),
            Check("no second process", not e["multiprocessing"]),
            Check("device 0's main thread computes the loss and drives the step",
                  e["main_thread_devices"] == [0] and e["loss_devices"] == [0])]


def c03(e: dict[str, Any]) -> list[Check]:
    return [Check("DataParallel uses Python multiprocessing", bool(e["multiprocessing"]))]


def c04(e: dict[str, Any]) -> list[Check]:
    out = []
    for model in ("gpt2-124m", "resnet50"):
        peak, busy = e[f"{model}_peak_GiB"], e[f"{model}_busy_ms"]
        out += [Check(f"{model}: device 0 has the highest peak", peak[0] > max(peak[1:])),
                Check(f"{model}: device 0 is the busiest", busy[0] > max(busy[1:]))]
    out += [Check("the imbalance grows with the output size (simulated)",
                  e["gpt2-124m_imbalance"] > e["resnet50_imbalance"], core=False),
            Check("the imbalance grows with the output size (measured)",
                  e["measured_10000_outputs_imbalance"] > e["measured_10_outputs_imbalance"],
                  core=False)]
    return out


def c05(e: dict[str, Any]) -> list[Check]:
    return [Check("gradients are summed onto device 0", e["reduce_target_device"] == [0]),
            Check("device 0 alone runs the optimizer", e["optimizer_devices"] == [0]),
            Check("the new weights are copied out right after the update",
                  e["copies_after_update"] > 0, core=False),
            Check("the next forward replicates the module from device 0",
                  bool(e["replicate_every_forward"]), core=False)]


def c06(e: dict[str, Any]) -> list[Check]:
    small = e["predicted_threads_speedup_4_small_ops"]
    big = e["predicted_threads_speedup_4_big_matmuls"]
    checks = [Check("2 threads of pure Python: no speed-up, one GIL (simulated)",
                    e["simulated_threads_speedup_2_python"] < 1.1),
              Check("the GIL caps threads far below processes on many small ops (predicted)",
                    small < 0.5 * 4 and small < big)]
    thr, proc = e["threads_speedup_2"], e["processes_speedup_2"]
    if thr is None:
        return [*checks, Check("measured here", False, core=False)]
    return [*checks,
            Check("measured: 2 processes beat 2 threads on Python work (timed; needs 2 idle "
                  "cores)", proc > thr, core=False)]


def c07(e: dict[str, Any]) -> list[Check]:
    r = _ranks(e)
    if not r:
        return _measured(e)
    before = [x["params_before_wrap"] for x in r]
    wrap = [x["params_after_wrap"] for x in r]
    step = [x["params_after_step"] for x in r]
    return [Check("ranks start different and equal rank 0 after wrapping (broadcast once)",
                  len(set(before)) == len(r) and all(abs(w - before[0]) < TOL for w in wrap)),
            Check("each rank's own optimizer keeps them equal",
                  max(step) - min(step) < TOL),
            Check("what is all-reduced is the gradients: bucket elements = parameters",
                  all(sum(x["bucket_numel"]) == x["param_numel_on_rank"] for x in r))]


def c08(e: dict[str, Any]) -> list[Check]:
    r = _ranks(e)
    if not r:
        return _measured(e)
    return [Check("the average needs a broadcast from rank 0 after the all-reduce",
                  any(x["grad_vs_mean_max_abs"] > TOL for x in r)),
            Check("rank 0 sends more than the others (simulated ring)",
                  e["ring_sent_bytes"][0] > max(e["ring_sent_bytes"][1:]))]


def c09(e: dict[str, Any]) -> list[Check]:
    r = _ranks(e)
    if not r:
        return _measured(e)
    return [Check("the gradients go in several buckets, as dpsim predicts",
                  r[0]["all_reduce_calls"] == len(e["predicted_bucket_bytes"]) > 1),
            Check("the first all-reduce starts before backward ends",
                  all(x["first_all_reduce_before_backward_end"] for x in r)),
            Check("bucket_cap_mb defaults to 25", e["default_bucket_cap_mb"] == 25.0)]


def c10(e: dict[str, Any]) -> list[Check]:
    return [Check(f"DDP slower than DP: {row['regime']}", row["ddp_ms"] > row["dp_ms"])
            for row in e["rows"]]


def c11(e: dict[str, Any]) -> list[Check]:
    full = e["ddp_params_GiB"]
    return [Check("DDP keeps less than a whole model per device", full < max(e["dp_params_GiB"])),
            Check("DP's device 0 peaks above a DDP rank", e["dp_peak_GiB"][0] > e["ddp_peak_GiB"],
                  core=False)]


def c12(e: dict[str, Any]) -> list[Check]:
    r = _ranks(e)
    if not r:
        return _measured(e)
    return [Check("each DDP rank holds fewer parameters than the model",
                  any(x["param_numel_on_rank"] < e["model_numel"] for x in r))]


def c13(e: dict[str, Any]) -> list[Check]:
    return [Check("DDP subclasses DataParallel", bool(e["ddp_subclasses_dp"])),
            Check("DDP calls DataParallel / replicate / parallel_apply",
                  bool(e["ddp_calls_dp_machinery"]))]


def c14(e: dict[str, Any]) -> list[Check]:
    kept = e["kept_fraction"]
    return [Check("parameters, gradients and optimizer state are sharded", max(kept) < 1),
            Check("parameters are all-gathered before forward and again before backward",
                  e["all_gather_forward"] >= 1 and e["all_gather_backward"] >= 1),
            Check("gradients are reduce-scattered (no all-reduce)",
                  e["reduce_scatter"] >= 1 and e["all_reduce"] == 0)]


def c15(e: dict[str, Any]) -> list[Check]:
    ratio = e["fsdp_traffic_GB"] / e["ddp_traffic_GB"]
    return [Check("memory per device falls by more than 2x", e["ddp_GiB"] > 2 * e["fsdp_GiB"]),
            Check("traffic per step rises", ratio > 1),
            Check("by about 1.5x", abs(ratio - 1.5) < 0.05, core=False)]


def c16(e: dict[str, Any]) -> list[Check]:
    dpe, ddpe = e["dp_efficiency"], e["ddp_efficiency"]
    return [Check("nn.DataParallel(model) is one line that runs", bool(e["one_line_runs"])),
            Check("torch's docs recommend DDP instead", bool(e["docs_recommend_ddp"])),
            Check("DDP is faster in one node (simulated, 4 and 8 devices)",
                  ddpe[2] > dpe[2] and ddpe[3] > dpe[3]),
            Check("DP loses efficiency past a few devices", dpe[1] > dpe[3], core=False)]


def c17(e: dict[str, Any]) -> list[Check]:
    if not e["measured"]:
        return [Check(f"tested here ({e['cuda_gpus']} CUDA GPU): needs a GPU and NCCL", False,
                      core=False)]
    return [Check("two NCCL processes on one GPU fail or hang", bool(e["failed_or_hung"]))]


def c18(e: dict[str, Any]) -> list[Check]:
    r = _ranks(e)
    if not r:
        return _measured(e)
    ns = r[0]["no_sync"]
    return [Check("no_sync skips the all-reduce of the first micro-batches",
                  ns["all_reduce_calls_with_no_sync"] == 1
                  < ns["all_reduce_calls_without_no_sync"] == ns["micro_batches"]),
            Check("and ends with the same gradients", ns["max_grad_difference"] < TOL)]


@dataclass(frozen=True)
class Claim:
    """A claim as it circulates, how it is tested, and its checks."""

    number: int
    text: str
    source: str  # "measured", "simulated", "measured + simulated", "read from torch"
    checks: Callable[[dict[str, Any]], list[Check]]


CLAIMS: tuple[Claim, ...] = tuple(Claim(n, t, s, f) for n, t, s, f in (
    (1, "DP splits the total batch across GPUs (128 on 4 -> 32 each); DDP's batch_size is per "
        "GPU, so the global batch is local x world_size", "measured", c01),
    (2, "DP is single-process, multi-threaded; the main process on GPU 0 drives all GPUs",
     "read from torch + simulated", c02),
    (3, "DP is implemented with Python multiprocessing", "read from torch", c03),
    (4, "DP: GPU 0 uses more memory and is busier than the others (outputs gathered, loss "
        "and gradient reduction there)", "simulated + measured", c04),
    (5, "DP: gradients are summed on GPU 0, GPU 0 updates the parameters, then the updated "
        "weights are copied to the other GPUs", "simulated + read from torch", c05),
    (6, "DDP avoids the GIL because each GPU has its own process and interpreter",
     "simulated + measured + predicted", c06),
    (7, "DDP exchanges only gradients; each process runs its own optimizer; initial "
        "parameters are broadcast once from rank 0", "measured", c07),
    (8, "DDP: gradients are averaged and then rank 0 broadcasts them to all processes",
     "measured + simulated", c08),
    (9, "DDP overlaps gradient all-reduce with the backward pass using buckets "
        "(bucket_cap_mb, default 25)", "measured", c09),
    (10, "DDP is slower than DP on a single node because of extra communication and data "
         "splitting", "simulated", c10),
    (11, "DP uses more memory than DDP because it replicates the whole model on each GPU",
     "simulated", c11),
    (12, "DDP partitions the model parameters across nodes", "measured", c12),
    (13, "DP is a building block of DDP", "read from torch", c13),
    (14, "FSDP shards parameters, gradients and optimizer states; it gathers parameters "
         "before forward/backward and reduce-scatters gradients", "simulated", c14),
    (15, "FSDP greatly reduces memory per GPU at the cost of more communication",
     "simulated", c15),
    (16, "DP only needs one line and suits 2-4 GPUs; DDP is recommended even on a single node",
     "measured + simulated + read from torch", c16),
    (17, "Multiple processes sharing one GPU under NCCL can deadlock; each process needs its "
         "own GPU", "measured on a GPU only", c17),
    (18, "DDP supports gradient accumulation and delayed all-reduce (no_sync)", "measured", c18),
))
