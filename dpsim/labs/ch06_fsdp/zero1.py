"""ZeRO-1 for real: DDP with `ZeroRedundancyOptimizer`, optimizer state per rank measured.

Each rank steps Adam only for the parameter tensors it owns and broadcasts them after the
step; its optimizer state is measured by storage and predicted by
`zero_partition.zero1_optimizer_bytes` (torch's greedy partition by tensor size).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dpsim.runtime.measure import optimizer_tensors, storage_bytes
from dpsim.runtime.models.tiny_transformer import tiny_transformer, token_batch
from dpsim.sim.cost.zero_partition import zero1_optimizer_bytes


def zero1_rank(rank: int, world_size: int, batch: int = 4, seed: int = 0) -> dict[str, Any]:
    """On each rank: one DDP step with ZeroRedundancyOptimizer(Adam) and one with Adam."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = token_batch(batch * world_size, seed)
    xs, ys = x.chunk(world_size)[rank].clone(), y.chunk(world_size)[rank].clone()
    out: dict[str, Any] = {}
    params: dict[str, dict[str, torch.Tensor]] = {}
    for kind in ("zero1", "adam"):
        model = DDP(tiny_transformer(seed))
        opt: Any = (ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-2,
                                            foreach=False) if kind == "zero1"
                    else torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False))
        nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()
        local = opt.optim if kind == "zero1" else opt
        out[f"{kind}_optimizer_B"] = storage_bytes(optimizer_tensors(local))
        params[kind] = {n: p.detach().clone() for n, p in model.named_parameters()}
    numels = [p.numel() for p in tiny_transformer(seed).parameters()]
    out["predicted_zero1_optimizer_B"] = zero1_optimizer_bytes(numels, world_size)[rank]
    out["max_param_diff"] = max(float((params["zero1"][n] - p).abs().max())
                                for n, p in params["adam"].items())
    return out
