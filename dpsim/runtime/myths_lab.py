"""Measurements for the myths lab: one small real DDP run, torch's own source, the GIL.

`ddp_facts_rank` runs on every rank of a real process group (gloo on CPU) and records
what DDP does: the initial parameters after wrapping (different seeds per rank), the
gradients right after backward against every rank's local gradient, the all-reduce calls
per backward (the second: DDP rebuilds its buckets after the first) and when they start,
the parameters after each rank's own optimizer step, how many samples each rank's
DataLoader gives, and no_sync (from `ddp_options`).
`torch_source_facts` reads torch's DataParallel and DDP sources (what they import and
call). Everything here is measured or read on this machine; nothing is simulated.
"""

from __future__ import annotations

import inspect
import re
import time
from typing import Any

import torch
from torch import nn

HIDDEN = 1024  # Linear(1024, 1024) layers: 4 MiB of fp32 gradient each
N_LAYERS = 8  # 8 x 4 MiB = 32 MiB: more than one 25 MiB bucket


def _model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Linear(HIDDEN, HIDDEN) for _ in range(N_LAYERS)])


def _flat(tensors: Any) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def ddp_facts_rank(rank: int, world_size: int, batch_per_rank: int = 4) -> dict[str, Any]:
    """Run on each rank inside a process group; return what this rank saw (floats, ints)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    from dpsim.runtime.batch_semantics import ddp_batch_worker
    from dpsim.runtime.ddp_options import no_sync_demo

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
    }


def predicted_buckets() -> list[int]:
    """dpsim's bucket sizes (bytes) for the model `ddp_facts_rank` wraps."""
    from dpsim.strategies.ddp import GradTensor, build_buckets

    model = nn.Sequential(*[nn.Linear(HIDDEN, HIDDEN, device="meta") for _ in range(N_LAYERS)])
    tensors = [GradTensor(n, p.numel() * 4) for n, p in model.named_parameters()]
    return [b.nbytes for b in build_buckets(tensors)]


def torch_source_facts() -> dict[str, Any]:
    """What torch's DataParallel and DDP are made of, read from their source."""
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
        "dp_docs_recommend_ddp": "recommended to use" in doc and "DistributedDataParallel" in doc,
    }


def dp_one_line_runs() -> bool:
    """`nn.DataParallel(model)` wraps and runs a forward here (on CPU it calls the module)."""
    model = nn.DataParallel(nn.Linear(4, 2))
    return tuple(model(torch.zeros(3, 4)).shape) == (3, 2)
