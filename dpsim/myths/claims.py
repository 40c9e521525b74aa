"""The claims of the myths lab and the checks that judge them from evidence.

Each entry: the claim as it circulates, and a function from its typed evidence (see
`dpsim.myths.evidence`) to a list of `Check`s (`dpsim.myths.checks`), each labelled with
its kind of evidence. Every claim has at least one core check that is not the dpsim
model; the model's checks are shown as "the model says" and never decide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dpsim.myths import published as pub
from dpsim.myths.checks import (
    MEASURED,
    MODEL,
    PUBLISHED,
    REENACTED,
    TORCH,
    Check,
    above,
    below,
    untested,
)
from dpsim.myths.evidence import (
    BatchSplit,
    DDPRun,
    DPAdvice,
    DPDeviceZero,
    DPMemory,
    DPThreads,
    DPUpdate,
    DPvsDDP,
    FSDPCost,
    FSDPShards,
    GILEvidence,
    NCCLOneGPU,
)

if TYPE_CHECKING:
    from dpsim.labs.ch08_myths.myths_lab import RankFacts, SourceFacts

E = TypeVar("E")  # a claim's piece of evidence
TOL = 1e-5  # float32 agreement between ranks
NO_RUN = "the real multi-process run was skipped (Lab(measure=False))"


def _ranks(e: DDPRun | DPMemory) -> list[RankFacts]:
    return e["ranks"] or []


def batch_is_global_in_dp_per_process_in_ddp(e: BatchSplit) -> list[Check]:
    chunks, n = e["dp_chunks"], e["dp_devices"]
    checks = [Check("DP splits its batch: devices get batch / N each",
                    sum(chunks) == e["dp_batch"] and chunks == [e["dp_batch"] // n] * n,
                    REENACTED)]
    per_rank = e["ddp_samples_per_rank"]
    if per_rank is None:
        return [*checks, untested("DDP's batch_size is per process", MEASURED, NO_RUN)]
    return [*checks,
            Check("DDP: every process gets batch_size samples",
                  all(s == e["ddp_batch_size_arg"] for s in per_rank)),
            Check("DDP: global batch = batch_size x world_size",
                  sum(per_rank) == e["ddp_batch_size_arg"] * e["ddp_world_size"])]


def dp_is_one_process_driven_from_gpu0(e: DPThreads) -> list[Check]:
    return [Check("parallel_apply runs one thread per device", bool(e["threads"]), TORCH),
            Check("no second process", not e["multiprocessing"], TORCH),
            Check("outputs are gathered on device_ids[0] by default",
                  bool(e["output_device_defaults_first"]), TORCH),
            Check("the loss is computed on device 0 only", e["reenacted_loss_devices"] == [0],
                  REENACTED),
            Check("device 0's main thread computes the loss and drives the step",
                  e["main_thread_devices"] == [0] and e["loss_devices"] == [0], MODEL, False)]


def dp_uses_multiprocessing(e: DPThreads) -> list[Check]:
    return [Check("DataParallel uses Python multiprocessing", bool(e["multiprocessing"]),
                  TORCH)]


def dp_gpu0_holds_and_does_more(e: DPDeviceZero) -> list[Check]:
    out = [Check("GPU 0 does more work than the others (reported)", True, PUBLISHED,
                 cite=pub.HF_GPU0_MORE_WORK),
           Check("device 0 alone runs the loss and the optimizer step",
                 e["reenacted_device0_only_kinds"] == ["loss", "optimizer"], REENACTED)]
    for n_out, peaks in e["reenacted_peak_bytes"].items():
        out.append(Check(f"device 0 has the highest peak ({n_out} outputs)",
                         peaks[0] > max(peaks[1:]), REENACTED))
    gpu = e["gpu_peak_bytes"]
    out.append(Check("device 0 has the highest peak on real GPUs", gpu[0] > max(gpu[1:]))
               if gpu else untested("device 0 has the highest peak on real GPUs", MEASURED,
                                    e["gpu_why"]))
    out += [Check("the imbalance grows with the output size",
                  e["reenacted_imbalance"][10_000] > e["reenacted_imbalance"][10],
                  REENACTED, core=False)]
    for model, peak in e["sim_peak_GiB"].items():
        out.append(Check(f"{model} on 4 A100: device 0 has the highest peak",
                         peak[0] > max(peak[1:]), MODEL, False))
    return out


def dp_updates_on_gpu0_then_copies_weights_out(e: DPUpdate) -> list[Check]:
    return [Check("replicas' gradients are summed onto the source device (Broadcast.backward "
                  "is ReduceAddCoalesced)", bool(e["replicate_backward_reduces"]), TORCH),
            Check("gradients are summed onto device 0", e["reduce_target_device"] == [0],
                  REENACTED),
            Check("device 0 alone runs the optimizer", e["optimizer_devices"] == [0],
                  REENACTED),
            Check("the new weights are copied out right after the update",
                  e["copies_after_update"] > 0, REENACTED),
            Check("instead, the next forward replicates the module from device 0",
                  bool(e["replicate_every_forward"]), TORCH, core=False),
            Check("nothing is copied after the optimizer step", e["sim_copies_after_update"] == 0,
                  MODEL, False)]


def ddp_avoids_the_gil(e: GILEvidence) -> list[Check]:
    pids = e["ddp_rank_pids"]
    out = [Check("each DDP rank is its own process (own interpreter, own GIL)",
                 len(set(pids)) == len(pids) > 1) if pids else
           untested("each DDP rank is its own process", MEASURED, NO_RUN)]
    if e["threads_speedups"]:
        # an illustration, not a decision: the claim holds by construction (the check
        # above); a timing on a shared machine is noisy
        out += [replace(below("2 threads of pure Python: no speed-up over 1 (one GIL)",
                              e["threads_speedups"], 1.3, "x"), core=False),
                replace(above("2 processes do more Python work per second than 2 threads",
                              e["processes_over_threads"], 1.0, "x"), core=False)]
    else:
        out.append(untested("threads vs processes, timed", MEASURED, NO_RUN))
    return [*out,
            Check("2 threads of pure Python: no speed-up (simulated GIL)",
                  e["simulated_threads_speedup_2_python"] < 1.1, MODEL, False),
            Check("the GIL caps 4 threads far below 4 processes on many small ops",
                  e["predicted_threads_speedup_4_small_ops"] < 2, MODEL, False)]


def ddp_exchanges_only_gradients(e: DDPRun) -> list[Check]:
    r = _ranks(e)
    if not r:
        return [untested("ranks equal rank 0 after wrapping", MEASURED, NO_RUN)]
    before = [x["params_before_wrap"] for x in r]
    wrap = [x["params_after_wrap"] for x in r]
    step = [x["params_after_step"] for x in r]
    return [Check("ranks start different and equal rank 0 after wrapping (broadcast once)",
                  len(set(before)) == len(r) and all(abs(w - before[0]) < TOL for w in wrap)),
            Check("each rank's own optimizer keeps them equal", max(step) - min(step) < TOL),
            Check("what is all-reduced is the gradients: bucket elements = parameters",
                  all(sum(x["bucket_numel"]) == x["param_numel_on_rank"] for x in r))]


def ddp_rank0_broadcasts_the_average(e: DDPRun) -> list[Check]:
    r = _ranks(e)
    if not r:
        return [untested("the average needs a broadcast after the all-reduce", MEASURED,
                         NO_RUN)]
    return [Check("after backward a rank's gradients still differ from the mean (a broadcast "
                  "would be needed)", any(x["grad_vs_mean_max_abs"] > TOL for x in r)),
            Check("rank 0 sends more than the others (ring all-reduce)",
                  e["ring_sent_bytes"][0] > max(e["ring_sent_bytes"][1:]), MODEL, False)]


def ddp_overlaps_buckets_with_backward(e: DDPRun) -> list[Check]:
    r = _ranks(e)
    if not r:
        return [untested("DDP overlaps buckets with backward", MEASURED, NO_RUN)]
    calls = r[0]["all_reduce_calls"]
    return [Check("after the first step the gradients go in several buckets", calls > 1),
            Check("the first all-reduce starts before backward ends",
                  all(x["first_all_reduce_before_backward_end"] for x in r)),
            Check("bucket_cap_mb defaults to 25", e["default_bucket_cap_mb"] == 25.0, TORCH),
            Check("torch's bucket assignment gives the measured number of buckets",
                  e["torch_rebuilt_bucket_count"] == calls, TORCH, core=False),
            Check("the first step all-reduces one bucket holding every gradient "
                  "(find_unused_parameters=False)",
                  all(x["all_reduce_calls_first_backward"] == 1 for x in r), core=False),
            Check("dpsim's buckets match the measured ones",
                  [4 * n for n in r[0]["bucket_numel"]] == e["predicted_bucket_bytes"],
                  MODEL, False)]


def ddp_slower_than_dp_on_one_node(e: DPvsDDP) -> list[Check]:
    dp, nv, no_nv = pub.HF_DP_S, pub.HF_DDP_NVLINK_S, pub.HF_DDP_NO_NVLINK_S
    return [Check(f"DDP slower than DP on 2 GPUs with NVLink ({nv.value:.0f} s vs "
                  f"{dp.value:.0f} s)", nv.value > dp.value, PUBLISHED, cite=nv.cite),
            # like with like: the published DP run had NVLink; DDP without it ran in
            # (131 s), but no DP run without NVLink was published
            untested("DDP slower than DP on 2 GPUs, both without NVLink P2P", PUBLISHED,
                     f"the published run ({no_nv.cite}) timed DDP without NVLink "
                     f"({no_nv.value:.0f} s) but DP only with it ({dp.value:.0f} s)"),
            Check("the reason: DDP communicates more per batch than DP",
                  pub.HF_DDP_EXCHANGES_PER_BATCH > pub.HF_DP_EXCHANGES_PER_BATCH, PUBLISHED,
                  cite=pub.HF_DDP_ONE_EXCHANGE),
            untested("DDP slower than DP on this machine's GPUs", MEASURED, e["gpu_why"]),
            *[Check(f"DDP slower than DP: {row['regime']}", row["ddp_ms"] > row["dp_ms"],
                    MODEL, False) for row in e["rows"]]]


def dp_uses_more_memory_than_ddp(e: DPMemory) -> list[Check]:
    r = _ranks(e)
    peaks, gpu = e["reenacted_peak_bytes"], e["gpu_peak_bytes"]
    out = [Check("DP's device 0 peaks above the other devices", peaks[0] > max(peaks[1:]),
                 REENACTED),
           Check("DP holds a whole model on every device", bool(e["reenacted_full_replicas"]),
                 REENACTED),
           Check("DP's device 0 peaks above the other GPUs", gpu[0] > max(gpu[1:])) if gpu else
           untested("DP's device 0 peaks above the other GPUs", MEASURED, e["gpu_why"]),
           Check("DDP, unlike DP, keeps less than a whole model per device",
                 any(x["param_numel_on_rank"] < e["model_numel"] for x in r)) if r else
           untested("DDP keeps less than a whole model per device", MEASURED, NO_RUN),
           Check("DDP keeps less than a whole model per device (simulated)",
                 e["ddp_params_GiB"] < max(e["dp_params_GiB"]), MODEL, False)]
    return out


def ddp_partitions_parameters(e: DDPRun) -> list[Check]:
    r = _ranks(e)
    if not r:
        return [untested("each DDP rank holds fewer parameters than the model", MEASURED,
                         NO_RUN)]
    return [Check("each DDP rank holds fewer parameters than the model",
                  any(x["param_numel_on_rank"] < e["model_numel"] for x in r))]


def dp_is_a_building_block_of_ddp(e: SourceFacts) -> list[Check]:
    return [Check("DDP subclasses DataParallel", bool(e["ddp_subclasses_dp"]), TORCH),
            Check("DDP calls DataParallel / replicate / parallel_apply",
                  bool(e["ddp_calls_dp_machinery"]), TORCH)]


def fsdp_shards_gathers_and_reduce_scatters(e: FSDPShards) -> list[Check]:
    f = e["fsdp"]
    sim = [Check("all-gathers before forward and backward, reduce-scatters, no all-reduce "
                 "(simulated ZeRO-3)", e["sim_all_gather"] > 0 and e["sim_all_reduce"] == 0,
                 MODEL, False)]
    if f is None:
        return [untested("FSDP2 shards and gathers, measured", MEASURED, NO_RUN), *sim]
    return [Check("parameters, gradients and optimizer state are sharded: each rank keeps "
                  "less than the whole", max(f["kept_fraction"]) < 1),
            Check("every block is all-gathered before its forward and again for its backward",
                  f["blocks_gathered_twice"]),
            Check("every block's gradients are reduce-scattered once", f["blocks_reduced_once"]),
            *sim]


def fsdp_trades_communication_for_memory(e: FSDPCost) -> list[Check]:
    f = e["fsdp"]
    dp, z3 = pub.ZERO_DP_TRAFFIC, pub.ZERO_3_TRAFFIC
    out = [Check(f"traffic per step rises: {z3.value:g} vs {dp.value:g} x model size",
                 z3.value > dp.value, PUBLISHED, cite=f"{dp.cite}; {z3.cite}")]
    if f is None:
        out.append(untested("memory per rank falls with the ranks", MEASURED, NO_RUN))
    else:
        out += [Check(f"memory per rank falls: each of {f['world_size']} ranks keeps at most "
                      f"{max(f['kept_fraction']):.0%} of the model states",
                      max(f["kept_fraction"]) < 1.5 / f["world_size"]),
                Check("collectives per block per step: 2 all-gathers + 1 reduce-scatter = "
                      "1.5 all-reduces", f["blocks_gathered_twice"] and f["blocks_reduced_once"],
                      core=False)]
    ratio = e["fsdp_traffic_GB"] / e["ddp_traffic_GB"]
    return [*out, Check(f"7B on 8 devices: traffic x{ratio:.2f}, memory / "
                        f"{e['ddp_GiB'] / e['fsdp_GiB']:.1f}", ratio > 1, MODEL, False)]


def dp_one_line_for_few_gpus_ddp_recommended(e: DPAdvice) -> list[Check]:
    dp, nv = pub.HF_DP_S, pub.HF_DDP_NVLINK_S
    dpe, ddpe = e["dp_efficiency"], e["ddp_efficiency"]
    return [Check("nn.DataParallel(model) is one line that runs", bool(e["one_line_runs"])),
            Check("torch's docs recommend DDP even on a single node",
                  bool(e["docs_recommend_ddp"]), TORCH),
            Check(f"on 2 GPUs DP is within 15 % of DDP ({dp.value:.0f} s vs {nv.value:.0f} s)",
                  dp.value < 1.15 * nv.value, PUBLISHED, cite=dp.cite),
            untested("DP suits 3-4 GPUs", PUBLISHED, pub.DP_3_TO_4_GPUS),
            Check("DDP is faster in one 8-GPU node at 4 and 8 devices",
                  ddpe[2] > dpe[2] and ddpe[3] > dpe[3], MODEL, False)]


def nccl_needs_a_gpu_per_process(e: NCCLOneGPU) -> list[Check]:
    run = e["nccl_run"]
    name = "two NCCL processes on one GPU fail or hang"
    measured = (Check(f"{name} ({run['outcome']})", run["outcome"] in ("failed", "hung"),
                      cite=run["detail"]) if run["ran"] else untested(name, MEASURED,
                                                                      run["detail"]))
    return [Check("NCCL does not support one device as two ranks and may hang", True,
                  PUBLISHED, cite=pub.NCCL_ONE_DEVICE_PER_RANK), measured]


def ddp_accumulates_with_no_sync(e: DDPRun) -> list[Check]:
    r = _ranks(e)
    if not r:
        return [untested("no_sync delays the all-reduce", MEASURED, NO_RUN)]
    ns = r[0]["no_sync"]
    return [Check("no_sync skips the all-reduce of the first micro-batches",
                  ns["all_reduce_calls_with_no_sync"] == 1
                  < ns["all_reduce_calls_without_no_sync"] == ns["micro_batches"]),
            Check("and ends with the same gradients", ns["max_grad_difference"] < TOL),
            Check("k micro-batches with losses divided by k = one k-times batch",
                  ns["max_grad_difference_vs_big_batch"] < TOL)]


@dataclass(frozen=True)
class Claim(Generic[E]):
    """A claim as it circulates and its checks, made from its piece of evidence."""

    number: int
    text: str
    checks: Callable[[E], list[Check]]


CLAIMS: tuple[Claim[Any], ...] = tuple(Claim(n, t, f) for n, t, f in (
    (1, "DP splits the total batch across GPUs (128 on 4 -> 32 each); DDP's batch_size is per "
        "GPU, so the global batch is local x world_size",
     batch_is_global_in_dp_per_process_in_ddp),
    (2, "DP is single-process, multi-threaded; the main process on GPU 0 drives all GPUs",
     dp_is_one_process_driven_from_gpu0),
    (3, "DP is implemented with Python multiprocessing", dp_uses_multiprocessing),
    (4, "DP: GPU 0 uses more memory and is busier than the others (outputs gathered, loss "
        "and gradient reduction there)", dp_gpu0_holds_and_does_more),
    (5, "DP: gradients are summed on GPU 0, GPU 0 updates the parameters, then the updated "
        "weights are copied to the other GPUs", dp_updates_on_gpu0_then_copies_weights_out),
    (6, "DDP avoids the GIL because each GPU has its own process and interpreter",
     ddp_avoids_the_gil),
    (7, "DDP exchanges only gradients; each process runs its own optimizer; initial "
        "parameters are broadcast once from rank 0", ddp_exchanges_only_gradients),
    (8, "DDP: gradients are averaged and then rank 0 broadcasts them to all processes",
     ddp_rank0_broadcasts_the_average),
    (9, "DDP overlaps gradient all-reduce with the backward pass using buckets "
        "(bucket_cap_mb, default 25)", ddp_overlaps_buckets_with_backward),
    (10, "DDP is slower than DP on a single node because of extra communication and data "
         "splitting", ddp_slower_than_dp_on_one_node),
    (11, "DP uses more memory than DDP because it replicates the whole model on each GPU",
     dp_uses_more_memory_than_ddp),
    (12, "DDP partitions the model parameters across nodes", ddp_partitions_parameters),
    (13, "DP is a building block of DDP", dp_is_a_building_block_of_ddp),
    (14, "FSDP shards parameters, gradients and optimizer states; it gathers parameters "
         "before forward/backward and reduce-scatters gradients",
     fsdp_shards_gathers_and_reduce_scatters),
    (15, "FSDP greatly reduces memory per GPU at the cost of more communication",
     fsdp_trades_communication_for_memory),
    (16, "DP only needs one line and suits 2-4 GPUs; DDP is recommended even on a single node",
     dp_one_line_for_few_gpus_ddp_recommended),
    (17, "Multiple processes sharing one GPU under NCCL can deadlock; each process needs its "
         "own GPU", nccl_needs_a_gpu_per_process),
    (18, "DDP supports gradient accumulation and delayed all-reduce (no_sync)",
     ddp_accumulates_with_no_sync),
))
