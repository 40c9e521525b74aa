"""Batch semantics, for real: DataParallel's batch is global, DDP's is per process.

`compare_batch_semantics` gives DP (re-enacted on the CPU) and DDP (real gloo processes)
the same `batch_size` and reports the samples each device or rank got.
"""

from __future__ import annotations

import itertools
from typing import Any

from torch import nn

from dpsim.labs.ch03_data_parallel.dp_reenact import reenact_step
from dpsim.sim.checks import require_int


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


def compare_batch_semantics(batch_size: int = 8, n_devices: int = 2, n_samples: int = 64,
                            seed: int = 0, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Run DP (re-enacted) and DDP (real gloo processes) with the same batch_size argument.

    Returns one row per strategy: samples each device/rank got, and samples per step.
    """
    require_int("batch_size", batch_size, 1, n_samples // max(n_devices, 1))
    require_int("n_devices", n_devices, 1, 8)
    from torch.utils.data import DataLoader

    from dpsim.runtime.data import classification
    from dpsim.runtime.launch import launch
    from dpsim.runtime.models import mlp

    dataset = classification(n_samples, 32, 10, seed)
    x, y = next(iter(DataLoader(dataset, batch_size=batch_size, shuffle=False)))
    dp = reenact_step(mlp(32, 64, 2, 10, seed), x, y, n_devices)
    bounds = [0]
    for size in dp.chunk_sizes:
        bounds.append(bounds[-1] + size)
    ranks = launch(ddp_batch_worker, n_devices, args=(batch_size, n_samples, seed),
                   backend="gloo", timeout_s=timeout_s)
    return [
        {"strategy": "DataParallel (1 process, threads)", "batch_size argument": batch_size,
         "samples per device": dp.chunk_sizes + [0] * (n_devices - len(dp.chunk_sizes)),
         "samples per step": sum(dp.chunk_sizes),
         "first indices per device": [list(range(a, b))[:4]
                                      for a, b in itertools.pairwise(bounds)]},
        {"strategy": f"DDP ({n_devices} processes, gloo)", "batch_size argument": batch_size,
         "samples per device": [r["samples"] for r in ranks],
         "samples per step": sum(r["samples"] for r in ranks),
         "first indices per device": [r["indices"][:4] for r in ranks]},
    ]
