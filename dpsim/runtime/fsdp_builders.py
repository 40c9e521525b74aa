"""FSDP2's building blocks, shared by chapters 6, 8, 9 and 10: the lab models at odd sizes,
`fully_shard` per block then the root over a 1-D device mesh, the bytes of a rank's local
shards, the chapter's data, and the same model trained in one process for comparison.

A rank's shard bytes are read from `DTensor.to_local()` (parameters, gradients, optimizer
state), both unpadded and as allocated (padded to ceil(dim0/N) rows), and compare with
dpsim's prediction (`fsdp_shards.fsdp_rank_bytes`). The real runs are `fsdp_run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from dpsim.runtime.models import build_model
from dpsim.sim import MemoryBreakdown, require_choice, require_int

MODELS = ("mlp", "residual")
TOLERANCE = 1e-5  # max |FSDP - one process| per parameter element after a few Adam steps
IN_FEATURES, N_CLASSES = 13, 5  # odd sizes, so shards do not divide evenly
SIZES: dict[str, dict[str, Any]] = {  # build_model sizes of each of MODELS
    "mlp": {"in_features": IN_FEATURES, "hidden": 37, "depth": 2, "n_classes": N_CLASSES},
    "residual": {"in_features": IN_FEATURES, "width": 30, "hidden": 45, "depth": 2,
                 "n_classes": N_CLASSES},
}


def fsdp_model(name: str, seed: int = 0) -> nn.Module:
    """The lab's model `name` at its odd sizes: "mlp" (13-37-37-5) or "residual"."""
    require_choice("model", name, MODELS)
    return build_model(name, seed=seed, **SIZES[name])


def blocks_of(model: nn.Module) -> list[nn.Module]:
    """The modules sharded one by one before the root: the blocks, else every leaf layer
    that owns parameters."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList):
        return list(blocks)
    return [m for m in model.modules()
            if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]


def param_shapes(model: nn.Module) -> list[tuple[int, ...]]:
    """Shapes of the (unsharded) parameters, in registration order."""
    return [tuple(p.shape) for p in model.parameters()]


def check_mesh(world_size: int, mesh_size: int | None) -> int:
    """The 1-D FSDP mesh must span every rank; return its size or raise ValueError."""
    require_int("world_size", world_size, 1)
    if mesh_size is None:
        return world_size
    require_int("mesh_size", mesh_size, 1)
    if mesh_size != world_size:
        raise ValueError(f"mesh_size={mesh_size} does not match world_size={world_size}; "
                         f"allowed: mesh_size == world_size (a 1-D FSDP mesh spans all ranks)")
    return mesh_size


def shard(model: nn.Module, mesh: Any, reshard_after_forward: bool = True) -> nn.Module:
    """`fully_shard` every block, then the root (which takes the remaining parameters).

    `reshard_after_forward` applies to the blocks. The root keeps its parameters unsharded
    after forward (`reshard_after_forward=False`, torch's own choice for the root when the
    argument is left out): backward needs them first, so freeing them only to all-gather
    them again at once would cost an all-gather and save no memory.
    """
    from torch.distributed.fsdp import fully_shard

    for block in blocks_of(model):
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    return model


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def local_bytes(tensors: Sequence[torch.Tensor], padded: bool) -> int:
    """Bytes of local shards: their elements, or (padded) their distinct storages."""
    if not padded:
        return sum(_local(t).numel() * _local(t).element_size() for t in tensors)
    seen: dict[int, int] = {}
    for t in tensors:
        storage = _local(t).untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def measure_shards(model: nn.Module, optimizer: torch.optim.Optimizer, padded: bool
                   ) -> MemoryBreakdown:
    """Measured bytes of this rank's parameters, gradients and optimizer state."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    states = [v for s in optimizer.state.values() for v in s.values()
              if isinstance(v, torch.Tensor)]
    return MemoryBreakdown(local_bytes(params, padded), local_bytes(grads, padded),
                           local_bytes(states, False))


def training_batches(steps: int, global_batch: int, seed: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """`steps` global batches of the chapter's data, end to end: x (steps * global_batch,
    IN_FEATURES) float32 and y (steps * global_batch,) int64, fixed by `seed`."""
    from dpsim.runtime.data import classification

    data = classification(steps * global_batch, IN_FEATURES, N_CLASSES, seed=seed)
    return data.tensors[0], data.tensors[1]


def train_one_process(model_name: str, steps: int, global_batch: int, lr: float, seed: int
                      ) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The reference: the same model trained in one process on the whole global batch."""
    from dpsim.runtime.optimizers import build_optimizer

    model = fsdp_model(model_name, seed)
    opt = build_optimizer("adam", model.parameters(), lr)
    x, y = training_batches(steps, global_batch, seed)
    losses = []
    for step in range(steps):
        sl = slice(step * global_batch, (step + 1) * global_batch)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x[sl]), y[sl])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {n: p.detach().clone() for n, p in model.named_parameters()}, losses
