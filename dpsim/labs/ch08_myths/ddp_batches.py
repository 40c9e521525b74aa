"""DDP's batch is per process: one rank's DataLoader over its DistributedSampler share.

The myths lab's evidence that `batch_size` means samples per rank under DDP (DataParallel's
batch, chapter 3, is global).
"""

from __future__ import annotations

from typing import Any

from torch import nn


def ddp_batch_worker(rank: int, world_size: int, batch_size: int, n_samples: int,
                     seed: int = 0) -> dict[str, Any]:
    """One DDP rank: a DataLoader(batch_size) over its DistributedSampler share, one step."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    from dpsim.runtime.data import classification
    from dpsim.runtime.models import mlp

    dataset = classification(n_samples, 32, 10, seed)
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=world_size,
                                                          rank=rank, shuffle=False)
    x, y = next(iter(DataLoader(dataset, batch_size=batch_size, sampler=sampler)))
    model = DistributedDataParallel(mlp(32, 64, 2, 10, seed))
    nn.functional.cross_entropy(model(x), y).backward()
    return {"rank": rank, "samples": int(x.shape[0]), "indices": list(sampler)[:batch_size]}
