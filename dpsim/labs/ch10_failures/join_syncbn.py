"""Two DDP corner cases, each in a small real run on gloo ranks.

Join (uneven inputs): rank r has `batches[r]` batches. A rank that runs out stops calling
forward/backward, so the others would wait forever in the gradient all-reduce. Under
`torch.distributed.algorithms.Join([model])` a finished rank keeps answering the
all-reduces with zeros (shadowing them) until every rank is done, and DDP divides by the
world size as always, so every rank ends with the same parameters.

SyncBatchNorm: a BatchNorm layer on each rank normalises with its own batch's mean and
variance; `nn.SyncBatchNorm` makes the ranks all-gather their (mean, variance, count), so
the statistics equal those of one BatchNorm over the global batch. torch runs SyncBatchNorm
in training only on GPU-like devices (it raises on CPU input: recorded here), so on CPU
the all-gather and the combination it performs are re-enacted (`synced_batch_stats`) on
real gloo ranks; the refusal message is returned too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dpsim.sim import require_int

N_FEATURES = 6


def _join_part(rank: int, n_batches: int) -> dict[str, Any]:
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(nn.Linear(N_FEATURES, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(10 + rank)
    steps = 0
    with Join([model]):
        for _ in range(n_batches):
            opt.zero_grad()
            model(torch.randn(4, N_FEATURES, generator=g)).pow(2).mean().backward()
            opt.step()
            steps += 1
    return {"steps": steps,
            "checksum": float(sum(p.detach().double().sum() for p in model.parameters()))}


def synced_batch_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What SyncBatchNorm computes in training (torch/nn/modules/_functions.py): each rank's
    per-feature mean, biased variance and count, all-gathered and combined into the global
    batch's mean and biased variance. Returns (mean, var)."""
    import torch.distributed as dist

    local = torch.cat([x.mean(0), x.var(0, unbiased=False), torch.tensor([float(len(x))])])
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    f = x.shape[1]
    means = torch.stack([p[:f] for p in parts])
    vars_ = torch.stack([p[f:2 * f] for p in parts])
    counts = torch.stack([p[2 * f:] for p in parts])
    total = counts.sum()
    mean = (counts * means).sum(0) / total
    var = (counts * (vars_ + (means - mean) ** 2)).sum(0) / total
    return mean, var


def _syncbn_part(rank: int, world_size: int, batch: int) -> dict[str, Any]:
    x = torch.randn(batch * world_size, N_FEATURES, generator=torch.Generator().manual_seed(3))
    mine = x[rank * batch:(rank + 1) * batch]
    bn = nn.BatchNorm1d(N_FEATURES, momentum=1.0)  # momentum 1: running stats = last batch
    bn(mine)
    real_sync = nn.SyncBatchNorm(N_FEATURES, momentum=1.0)
    try:
        real_sync(mine)
        refused = ""
    except ValueError as err:  # torch: training SyncBatchNorm needs GPU (or XPU, ...) input
        refused = str(err)
    mean, _ = synced_batch_stats(mine)
    return {"BatchNorm1d": bn.running_mean.tolist(),  # type: ignore[union-attr]
            "synced (re-enacted)": mean.tolist(), "SyncBatchNorm on CPU": refused}


def edge_rank(rank: int, world_size: int, batches: tuple[int, ...], batch: int
              ) -> dict[str, Any]:
    """Worker: the Join run, then the SyncBatchNorm run."""
    return {"join": _join_part(rank, batches[rank]),
            "syncbn": _syncbn_part(rank, world_size, batch)}


def reference_running_mean(world_size: int, batch: int) -> list[float]:
    """One BatchNorm1d over the global batch (one process): the running mean after a step."""
    x = torch.randn(batch * world_size, N_FEATURES, generator=torch.Generator().manual_seed(3))
    bn = nn.BatchNorm1d(N_FEATURES, momentum=1.0)
    bn(x)
    return bn.running_mean.tolist()  # type: ignore[union-attr]


def run_join_syncbn(batches: tuple[int, ...] = (5, 3), batch: int = 4, *,
                    timeout_s: float = 60.0) -> dict[str, Any]:
    """Launch len(batches) ranks: steps and parameter checksum per rank under Join; the
    running mean of BatchNorm1d and SyncBatchNorm per rank, and of one process."""
    from dpsim.runtime.launch import launch

    world_size = len(batches)
    require_int("len(batches)", world_size, 2, 8)
    for n in batches:
        require_int("batches", n, 1, 1000)
    require_int("batch", batch, 2, 1 << 12)
    ranks = launch(edge_rank, world_size, args=(tuple(batches), batch), backend="gloo",
                   timeout_s=timeout_s)
    ref = reference_running_mean(world_size, batch)
    err = {name: max(abs(a - b) for r in ranks for a, b in zip(r["syncbn"][name], ref,
                                                                 strict=True))
                  for name in ("BatchNorm1d", "synced (re-enacted)")}
    return {"steps": [r["join"]["steps"] for r in ranks],
            "checksums": [r["join"]["checksum"] for r in ranks],
            "running_mean_error": err,
            "cpu_refusal": ranks[0]["syncbn"]["SyncBatchNorm on CPU"]}
