"""Measurements for the myths lab: one small real DDP run, torch's own source, the GIL.

`ddp_facts_rank` runs on every rank of a real process group (gloo on CPU) and records
what DDP does: the initial parameters after wrapping (different seeds per rank), the
gradients right after backward against every rank's local gradient, the all-reduce calls
per backward (the second: DDP rebuilds its buckets after the first) and when they start,
the parameters after each rank's own optimizer step, how many samples each rank's
DataLoader gives, and no_sync (`no_sync.no_sync_demo`).
The same ranks then train a small model with FSDP2 (`fsdp_facts`: shard bytes and the
collectives of one recorded step). `torch_source_facts` reads torch's DataParallel and DDP
sources (what they import and call). `threads_vs_processes` times the GIL with repeats;
`dp_gpu_peaks` and `nccl_two_ranks_one_gpu` need CUDA GPUs and say why when there are
none. Everything here is measured or read on this machine; nothing is simulated.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import nn

from dpsim.runtime.models import build_model

HIDDEN = 1024  # Linear(1024, 1024) layers: 4 MiB of fp32 gradient each
N_LAYERS = 8  # 8 x 4 MiB = 32 MiB: more than one 25 MiB bucket


class FSDPRankFacts(TypedDict):
    """What one rank kept and did in its FSDP2 step (`fsdp_facts`)."""

    kept_fraction: float  # the largest share of parameters, gradients, optimizer state
    blocks: list[str]
    blocks_gathered_twice: bool
    blocks_reduced_once: bool


class RankFacts(TypedDict):
    """What one rank of `ddp_facts_rank` saw (floats, ints)."""

    rank: int
    params_before_wrap: float  # sum of the parameters before DDP() (a seed per rank)
    params_after_wrap: float
    params_after_step: float
    grad_vs_mean_max_abs: float  # DDP's gradient against the mean of the local ones
    grad_vs_local_max_abs: float
    all_reduce_calls_first_backward: int
    all_reduce_calls: int  # in the second backward, after DDP rebuilt its buckets
    bucket_numel: list[int]
    first_all_reduce_before_backward_end: bool
    param_numel_on_rank: int
    samples_per_rank: int
    no_sync: dict[str, Any]  # `no_sync_demo`'s counts and gradient differences
    pid: int
    fsdp: FSDPRankFacts


class SourceFacts(TypedDict):
    """What torch's DataParallel and DDP sources contain (`torch_source_facts`)."""

    parallel_apply_starts_threads: bool
    dp_uses_multiprocessing: bool
    dp_forward_replicates_every_call: bool
    ddp_subclasses_dp: bool
    ddp_calls_dp_machinery: list[str]  # the calls found, sorted
    ddp_default_bucket_cap_mb: float
    dp_output_device_defaults_first: bool
    replicate_backward_reduces: bool
    dp_docs_recommend_ddp: bool


class GILTimings(TypedDict):
    """`threads_vs_processes`: one entry per repeat."""

    threads_speedups: list[float]
    processes_over_threads: list[float]


class NCCLRun(TypedDict):
    """`nccl_two_ranks_one_gpu`: whether it ran, its outcome, and the detail that says why."""

    ran: bool
    outcome: str  # "ran", "failed", "hung", or "untested"
    detail: str


def _model(seed: int = 0, device: str | None = None) -> nn.Module:
    """N_LAYERS Linear(HIDDEN, HIDDEN) layers, nothing between them."""
    return build_model("stack", seed=seed, device=device,
                       widths=[HIDDEN] * (N_LAYERS + 1), activation="none")


def _flat(tensors: Any) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def ddp_facts_rank(rank: int, world_size: int, batch_per_rank: int = 4) -> RankFacts:
    """Run on each rank inside a process group; return what this rank saw (floats, ints)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    from dpsim.labs.ch08_myths.ddp_batches import ddp_batch_worker
    from dpsim.labs.ch08_myths.no_sync import no_sync_demo

    torch.set_num_threads(1)
    model = _model(seed=100 + rank)  # a different initialisation on every rank
    before = _flat(model.parameters()).sum().item()
    local = _model(seed=0)  # the same start as DDP's, for local gradients
    ddp = DistributedDataParallel(model)
    local.load_state_dict(ddp.module.state_dict())
    after_wrap = _flat(ddp.parameters()).sum().item()
    calls: list[tuple[float, int]] = []

    def hook(state: object, bucket):  # type: ignore[no-untyped-def]  # DDP reads annotations
        calls.append((time.perf_counter(), int(bucket.buffer().numel())))
        return allreduce_hook(state, bucket)  # type: ignore[arg-type]  # None: world

    ddp.register_comm_hook(None, hook)
    first_layer_grad_s: list[float] = []
    ddp.module[0].weight.register_hook(lambda g: first_layer_grad_s.append(time.perf_counter()))
    gen = torch.Generator().manual_seed(rank)  # each rank its own data
    x = torch.randn(batch_per_rank, HIDDEN, generator=gen)
    ddp(x).square().mean().backward()
    local(x).square().mean().backward()
    local_grad = _flat(p.grad for p in local.parameters())
    ddp_grad = _flat(p.grad for p in ddp.parameters())
    gathered = [torch.zeros_like(local_grad) for _ in range(world_size)]
    dist.all_gather(gathered, local_grad)  # only to check, after DDP's backward
    mean = torch.stack(gathered).mean(0)
    first_calls = len(calls)  # DDP rebuilds its buckets after the first backward
    calls.clear()
    first_layer_grad_s.clear()
    ddp.zero_grad()
    ddp(x).square().mean().backward()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)  # this rank's own optimizer
    opt.step()
    after_step = _flat(ddp.parameters()).sum().item()
    batch = ddp_batch_worker(rank, world_size, batch_size=8, n_samples=64)
    return {
        "rank": rank,
        "params_before_wrap": before,
        "params_after_wrap": after_wrap,
        "params_after_step": after_step,
        "grad_vs_mean_max_abs": float((ddp_grad - mean).abs().max()),
        "grad_vs_local_max_abs": float((ddp_grad - local_grad).abs().max()),
        "all_reduce_calls_first_backward": first_calls,
        "all_reduce_calls": len(calls),
        "bucket_numel": [n for _, n in calls],
        "first_all_reduce_before_backward_end": bool(
            calls and first_layer_grad_s and calls[0][0] < first_layer_grad_s[0]),
        "param_numel_on_rank": sum(p.numel() for p in ddp.parameters()),
        "samples_per_rank": batch["samples"],
        "no_sync": no_sync_demo(rank),
        "pid": os.getpid(),
        "fsdp": fsdp_facts(rank, world_size),
    }


def fsdp_facts(rank: int, world_size: int) -> FSDPRankFacts:
    """Train the residual model with FSDP2 for 2 steps; what this rank kept and did.

    kept_fraction: this rank's share of the full parameters, gradients and optimizer
    state (the largest of the three). Blocks (not the root) must be all-gathered twice in
    the recorded step, once before their forward and once after it (for backward), and
    reduce-scatter their gradients once.
    """
    from dpsim.runtime.fsdp_builders import fsdp_model
    from dpsim.runtime.fsdp_run import fsdp_rank
    from dpsim.sim import Trace

    out = fsdp_rank(rank, world_size, ("residual",), steps=2, record=True)["residual"]
    full = sum(p.numel() for p in fsdp_model("residual").parameters()) * 4
    local = out["local"]
    trace = Trace.from_dict(out["trace"])
    blocks = sorted({e.label for e in trace.events if e.kind == "forward"})
    twice, once = True, True
    for block in blocks:
        gathers = sorted(e.start_s for e in trace.events
                         if e.kind == "all_gather" and e.label == block)
        fwd = next(e for e in trace.events if e.kind == "forward" and e.label == block)
        twice &= len(gathers) == 2 and gathers[0] <= fwd.start_s and gathers[1] >= fwd.end_s
        once &= sum(1 for e in trace.events
                    if e.kind == "reduce_scatter" and e.label == block) == 1
    return {"kept_fraction": max(local.parameters / full, local.gradients / full,
                                 local.optimizer / (2 * full)),  # Adam: 2 states a parameter
            "blocks": blocks, "blocks_gathered_twice": bool(blocks) and twice,
            "blocks_reduced_once": bool(blocks) and once}


def predicted_buckets() -> list[int]:
    """dpsim's bucket sizes (bytes) for the model `ddp_facts_rank` wraps."""
    from dpsim.sim import GradTensor, build_buckets

    model = _model(device="meta")
    tensors = [GradTensor(n, p.numel() * 4) for n, p in model.named_parameters()]
    return [b.nbytes for b in build_buckets(tensors)]


def torch_source_facts() -> SourceFacts:
    """What torch's DataParallel and DDP are made of, read from their source."""
    import torch.nn.parallel._functions as fn_mod
    import torch.nn.parallel.data_parallel as dp_mod
    import torch.nn.parallel.distributed as ddp_mod
    import torch.nn.parallel.parallel_apply as pa_mod

    apply_src = inspect.getsource(pa_mod)
    dp_src = inspect.getsource(dp_mod)
    ddp_code = "\n".join(line for line in inspect.getsource(ddp_mod).splitlines()
                         if not line.strip().startswith((">>>", "#")))
    doc = torch.nn.DataParallel.__doc__ or ""
    return {
        "parallel_apply_starts_threads": "threading.Thread(" in apply_src,
        "dp_uses_multiprocessing": "multiprocessing" in dp_src + apply_src,
        "dp_forward_replicates_every_call": "self.replicate(" in inspect.getsource(
            torch.nn.DataParallel.forward),
        "ddp_subclasses_dp": issubclass(ddp_mod.DistributedDataParallel, torch.nn.DataParallel),
        "ddp_calls_dp_machinery": sorted(set(re.findall(
            r"(?<!Distributed)\bDataParallel\(|\breplicate\(|\bparallel_apply\(", ddp_code))),
        "ddp_default_bucket_cap_mb": float(getattr(ddp_mod, "_DEFAULT_BUCKET_CAP_MB", 0.0)),
        "dp_output_device_defaults_first": "output_device = device_ids[0]" in inspect.getsource(
            torch.nn.DataParallel.__init__),
        "replicate_backward_reduces": "ReduceAddCoalesced" in inspect.getsource(
            fn_mod.Broadcast.backward),
        "dp_docs_recommend_ddp": "recommended to use" in doc and "single" in doc
        and "DistributedDataParallel" in doc,
    }


def dp_one_line_runs() -> bool:
    """`nn.DataParallel(model)` wraps and runs a forward here (on CPU it calls the module)."""
    model = nn.DataParallel(nn.Linear(4, 2))
    return tuple(model(torch.zeros(3, 4)).shape) == (3, 2)


def torch_bucket_count() -> int:
    """Buckets torch's own assignment makes for `_model`'s gradients in reverse order, with
    the caps DDP rebuilds with by default (1 MiB first, then 25 MiB)."""
    import torch.distributed as dist

    params: list[torch.Tensor] = list(reversed(list(_model(0).parameters())))
    limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * 1024 * 1024]
    indices, _ = dist._compute_bucket_assignment_by_size(params, limits, [False] * len(params))
    return len(indices)


def threads_vs_processes(repeats: int = 5, work_s: float = 0.03) -> GILTimings:
    """Pure-Python work, timed `repeats` times: the speed-up of 2 threads over 1, and how
    much faster 2 processes finish the same work than 2 threads (paired by repeat)."""
    from dpsim.runtime.gil_measure import measure_scaling

    threads, ratio = [], []
    for _ in range(repeats):
        thr = measure_scaling("python", (1, 2), "threads", work_s=work_s, trials=1)
        proc = measure_scaling("python", (1, 2), "processes", work_s=work_s, trials=1)
        threads.append(thr.speedups[-1])
        ratio.append(thr.times_s[-1] / proc.times_s[-1])
    return {"threads_speedups": threads, "processes_over_threads": ratio}


def dp_gpu_peaks() -> tuple[list[int] | None, str]:
    """Peak CUDA bytes per device of one real nn.DataParallel step, or (None, why not)."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        return None, f"needs 2 CUDA GPUs; this machine has {n}"
    from dpsim.runtime.data import classification
    from dpsim.runtime.dp_cuda_step import cuda_step
    from dpsim.runtime.models import mlp

    x, y = classification(256, 32, 10_000, seed=0).tensors
    result = cuda_step(mlp(32, 256, 2, 10_000, seed=0).cuda(), x.cuda(), y.cuda(),
                       list(range(min(n, 4))))
    return [int(b) for b in result.trace.meta["peak_allocated"]], "measured"


def nccl_rank() -> None:
    """One rank of `nccl_two_ranks_one_gpu` (both ranks on cuda:0)."""
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    t = torch.ones(1 << 20, device="cuda:0")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()


def nccl_two_ranks_one_gpu(timeout_s: float = 60.0) -> NCCLRun:
    """Two processes as two NCCL ranks on one GPU, one all-reduce, inside a timeout.

    outcome: "ran", "failed" (a rank exited with an error) or "hung" (timeout; both are
    killed with their process groups). Without CUDA or NCCL: ran=False and why.
    """
    import torch.distributed as dist

    if not (torch.cuda.is_available() and dist.is_nccl_available()):
        return {"ran": False, "outcome": "untested",
                "detail": "needs a CUDA GPU and NCCL; this machine has "
                          f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} "
                          "CUDA GPUs"}
    from dpsim.runtime.launch import free_port

    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE="2", PYTHONPATH=str(root))
    code = "from dpsim.labs.ch08_myths.myths_lab import nccl_rank; nccl_rank()"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for r in range(2)]
    deadline, outcome, detail = time.monotonic() + timeout_s, "ran", ""
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            outcome = "hung"
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, 9)
        text = (p.communicate()[0] or "").strip().splitlines()
        if p.returncode not in (0, None) and outcome != "hung":
            outcome = "failed"
        detail = detail or (text[-1][:200] if text and p.returncode else "")
    return {"ran": True, "outcome": outcome,
            "detail": detail or f"{outcome} within {timeout_s:.0f} s"}
