"""A DDP checkpoint written by rank 0 and read by every rank: with a barrier, and without.

`ckpt_rank` trains a small DDP model, and at the end of each "epoch" rank 0 writes
`{"model", "optimizer", "epoch"}` with `torch.save` while the other ranks wait at
`dist.barrier()`; then every rank reads it back with `map_location` (the device this rank
uses: a checkpoint written from cuda:0 would otherwise load onto cuda:0 on every rank).
With `barrier=False` the reader does not wait: it reads whatever file is there, the previous
epoch's. To make that race happen on every run rather than now and then, rank 0 holds its
write until the readers have read (a store key): the stale read is then certain, not likely.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from dpsim.runtime.models import mlp
from dpsim.sim import require_bool, require_int


def _save(model: nn.Module, opt: torch.optim.Optimizer, epoch: int, path: str) -> None:
    """Write to a temporary name, then rename: a reader sees the old file or the new one."""
    tmp = f"{path}.tmp"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch},
               tmp)
    os.replace(tmp, path)


def ckpt_rank(rank: int, world_size: int, path: str, epochs: int, barrier: bool
              ) -> dict[str, Any]:
    """Worker: each epoch one DDP step, rank 0 saves, every rank loads; what each read."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    store = dist.distributed_c10d._get_default_store()
    device = torch.device("cpu")
    model = DDP(mlp(in_features=8, hidden=16, depth=1, n_classes=3, seed=0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(rank)
    read: list[int] = []
    for epoch in range(epochs):
        opt.zero_grad()
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if rank == 0:
            if not barrier and epoch > 0:  # hold the write until every reader has read
                store.wait([f"read{epoch}_{r}" for r in range(1, world_size)])
            _save(model.module, opt, epoch, path)
            if not barrier and epoch == 0:
                store.set("written0", "1")  # the first file must exist to be read at all
        if barrier:
            dist.barrier()  # nobody reads before rank 0 has written
        elif rank != 0 and epoch == 0:
            store.wait(["written0"])
        state = torch.load(path, map_location=device, weights_only=True)
        read.append(int(state["epoch"]))
        if not barrier and rank != 0:
            store.set(f"read{epoch}_{rank}", "1")
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    return {"read": read,
            "checksum": float(sum(p.detach().double().sum() for p in model.parameters()))}


def ckpt_modes(rank: int, world_size: int, ckpt_dir: str, epochs: int,
               barriers: tuple[bool, ...]) -> dict[bool, dict[str, Any]]:
    """Worker: `ckpt_rank` once per mode, each with its own file, in one launch."""
    return {b: ckpt_rank(rank, world_size, os.path.join(ckpt_dir, f"ddp_barrier{int(b)}.pt"),
                         epochs, b) for b in barriers}


def run_checkpoint_ddp(ckpt_dir: str, *, world_size: int = 2, epochs: int = 3,
                       barriers: tuple[bool, ...] = (True, False), timeout_s: float = 60.0
                       ) -> dict[bool, dict[str, list[Any]]]:
    """Per mode (barrier or not): "read", per rank, the epoch found in the checkpoint it read
    after each epoch (right: [0, 1, ..., epochs - 1] on every rank); "checksum", per rank,
    the sum of its parameters at the end (right: equal on every rank)."""
    from dpsim.runtime.launch import launch

    require_int("world_size", world_size, 2, 8)
    require_int("epochs", epochs, 2, 100)
    for b in barriers:
        require_bool("barriers", b)
    if not os.path.isdir(ckpt_dir):
        raise ValueError(f"ckpt_dir={ckpt_dir!r} is not a directory; allowed: an existing "
                         "writable directory (e.g. tempfile.mkdtemp())")
    ranks = launch(ckpt_modes, world_size, args=(ckpt_dir, epochs, tuple(barriers)),
                   backend="gloo", timeout_s=timeout_s)
    return {b: {"read": [r[b]["read"] for r in ranks],
                "checksum": [r[b]["checksum"] for r in ranks]} for b in barriers}
