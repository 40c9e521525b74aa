"""Gradient clipping across ranks: DDP, and FSDP2 whose gradients are DTensors.

`torch.nn.utils.clip_grad_norm_` needs the norm of the *global* gradient. Under DDP every
rank holds the whole averaged gradient, so the local norm is the global one. Under FSDP2
each rank holds a shard: torch computes the norm on DTensors (a partial sum reduced over
the mesh), so every rank gets the same total; a norm of `.to_local()` shards alone would
be each rank's own, smaller number. Both are checked against one process on the global batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dpsim.runtime.models import layer_stack
from dpsim.sim.checks import require_int, require_range

IN, HIDDEN, OUT = 13, 37, 5


def _model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return layer_stack([IN, HIDDEN, OUT], activation="gelu")


def _data(global_batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(global_batch, IN, generator=g), torch.randint(0, OUT, (global_batch,),
                                                                     generator=g)


def clip_reference(max_norm: float, global_batch: int = 8, seed: int = 0
                   ) -> tuple[float, dict[str, torch.Tensor]]:
    """One process on the global batch: (norm before clipping, clipped gradients)."""
    model = _model(seed)
    x, y = _data(global_batch, seed)
    nn.functional.cross_entropy(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return float(norm), {n: p.grad.clone() for n, p in model.named_parameters()
                         if p.grad is not None}


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def clip_rank(rank: int, world_size: int, max_norm: float = 0.5, global_batch: int = 8,
              seed: int = 0) -> dict[str, Any]:
    """On each rank: clip under DDP and under FSDP2; norms and the full clipped gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = _data(global_batch, seed)
    xs, ys = x.chunk(world_size)[rank].clone(), y.chunk(world_size)[rank].clone()
    out: dict[str, Any] = {}
    ddp = DDP(_model(seed))
    nn.functional.cross_entropy(ddp(xs), ys).backward()
    out["ddp_norm"] = float(nn.utils.clip_grad_norm_(ddp.parameters(), max_norm))
    out["ddp_grads"] = {n.removeprefix("module."): p.grad.clone()
                        for n, p in ddp.named_parameters() if p.grad is not None}
    mesh = init_device_mesh("cpu", (world_size,))
    model = _model(seed)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    nn.functional.cross_entropy(model(xs), ys).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    local = torch.sqrt(sum(g.to_local().pow(2).sum() for g in grads))  # type: ignore
    out["fsdp_local_shard_norm"] = float(local)
    total = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    out["fsdp_norm_type"] = type(total).__name__
    out["fsdp_norm"] = float(_full(total))
    out["fsdp_grads"] = {n: _full(p.grad) for n, p in model.named_parameters()
                         if p.grad is not None}
    return out


def run_clipping(world_size: int = 2, max_norm: float = 0.5, global_batch: int = 8,
                 seed: int = 0, timeout_s: float = 120.0) -> dict[str, Any]:
    """Launch the ranks; compare every rank's norm and gradients with one process."""
    from dpsim.runtime.launch import launch

    require_int("world_size", world_size, 1, 64)
    require_range("max_norm", max_norm, 0, low_inclusive=False)
    require_int("global_batch", global_batch, 1, 1 << 16)
    if global_batch % world_size:
        raise ValueError(f"global_batch={global_batch} does not split over world_size="
                         f"{world_size}; allowed: a multiple of world_size")
    ranks = launch(clip_rank, world_size, args=(max_norm, global_batch, seed),
                   backend="gloo", timeout_s=timeout_s)  # the FSDP2 part uses a CPU mesh
    return summarize_clipping(ranks, *clip_reference(max_norm, global_batch, seed))


def summarize_clipping(ranks: list[dict[str, Any]], ref_norm: float,
                       ref_grads: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Per strategy: the norms each rank saw and the largest gradient difference."""
    def diff(key: str) -> float:
        return max(float((r[key][n] - g).abs().max()) for r in ranks for n, g in ref_grads.items())
    return {"one_process_norm": ref_norm,
            "ddp_norms": [r["ddp_norm"] for r in ranks], "ddp_max_grad_diff": diff("ddp_grads"),
            "fsdp_norms": [r["fsdp_norm"] for r in ranks],
            "fsdp_norm_type": ranks[0]["fsdp_norm_type"],
            "fsdp_max_grad_diff": diff("fsdp_grads"),
            "local_shard_norms": [r["fsdp_local_shard_norm"] for r in ranks]}
