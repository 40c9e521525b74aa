"""A real HSDP run: FSDP2's `fully_shard` over a 2-D DeviceMesh (replicate x shard).

Each rank counts the bytes handed to every collective FSDP2 issues, by wrapping
`torch.distributed.all_gather_single`, `reduce_scatter_single` and `all_reduce` (which
FSDP2 calls through the module at each step), and files them under the mesh dimension
whose process group ran them. Next to that: the bytes of each rank's parameter shard
against `fsdp_shards.fsdp_rank_bytes` over the shard dimension, and the collective sizes
FSDP2 should issue (`predicted_collective_bytes`: padded shards, as FSDP2 allocates them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dpsim.runtime.fsdp_builders import (
    blocks_of,
    fsdp_model,
    param_shapes,
    shard,
    train_one_process,
    training_batches,
)
from dpsim.sim import fsdp_padded_shard_numel, fsdp_rank_bytes, require_int

MODEL = "residual"
TOLERANCE = 1e-5  # max |HSDP - one process| per element; see dcp_reshard.TOLERANCE
WRAPPED = ("all_gather_single", "reduce_scatter_single", "all_reduce")


@contextlib.contextmanager
def count_collectives(dims: dict[str, Any], log: list[tuple[str, str, int]]
                      ) -> Iterator[None]:
    """Append (mesh dim, collective, bytes of the full tensor) for each call FSDP2 makes on
    a group in `dims` ({name: ProcessGroup}); restore torch.distributed afterwards."""
    import torch.distributed as dist

    names = {id(g): n for n, g in dims.items()}
    saved = {name: getattr(dist, name) for name in WRAPPED}

    def wrap(name: str) -> Any:
        real = saved[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            group = kwargs.get("group")
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            if id(group) in names and tensors:
                full = max(t.numel() * t.element_size() for t in tensors)
                log.append((names[id(group)], name.removesuffix("_single"), full))
            return real(*args, **kwargs)
        return call

    for name in WRAPPED:
        setattr(dist, name, wrap(name))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)


def predicted_collective_bytes(shapes: list[tuple[int, ...]], replicate: int, shard_size: int,
                               bytes_per_param: int = 4, gathers: int = 2
                               ) -> dict[str, dict[str, int]]:
    """Bytes handed to the collectives in one step of one FSDP unit holding `shapes`:
    shard dim: `gathers` all-gathers (forward and backward; 1 for the root, which stays
    unsharded after forward), reduce-scatter (full padded size); replicate dim: all-reduce
    of the padded gradient shard."""
    padded = sum(fsdp_padded_shard_numel(s, shard_size) for s in shapes) * bytes_per_param
    out: dict[str, dict[str, int]] = {"shard": {}, "replicate": {}}
    if shard_size > 1:
        out["shard"] = {"all_gather": gathers * padded * shard_size,
                        "reduce_scatter": padded * shard_size}
    if replicate > 1:
        out["replicate"] = {"all_reduce": padded}
    return out


def hsdp_rank(rank: int, world_size: int, replicate: int, steps: int, global_batch: int,
              lr: float, seed: int) -> dict[str, Any]:
    """Worker: train with HSDP, count the collectives of the last step, measure shards."""
    from torch.distributed.device_mesh import init_device_mesh

    shard_size = world_size // replicate
    mesh = init_device_mesh("cpu", (replicate, shard_size),
                            mesh_dim_names=("replicate", "shard"))
    model = fsdp_model(MODEL, seed)
    shapes = param_shapes(model)
    shard(model, mesh)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, y = training_batches(steps, global_batch, seed)
    per = global_batch // world_size
    log: list[tuple[str, str, int]] = []
    dims = {"replicate": mesh.get_group("replicate"), "shard": mesh.get_group("shard")}
    for step in range(steps):
        lo = step * global_batch + rank * per
        counting = count_collectives(dims, log) if step == steps - 1 else contextlib.nullcontext()
        with counting:
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x[lo:lo + per]), y[lo:lo + per]).backward()
            opt.step()
    totals: dict[str, dict[str, int]] = {"shard": {}, "replicate": {}}
    for dim, op, nbytes in log:
        totals[dim][op] = totals[dim].get(op, 0) + nbytes
    units = [[tuple(p.shape) for p in b.parameters()] for b in blocks_of(model)]
    in_blocks = {id(p) for b in blocks_of(model) for p in b.parameters()}
    units.append([tuple(p.shape) for p in model.parameters() if id(p) not in in_blocks])
    full = {n: p.full_tensor().detach() for n, p in model.named_parameters()}  # type: ignore[attr-defined]
    coord = mesh.get_coordinate() or [0, 0]
    return {"measured": totals, "units": units,
            "param_bytes": sum(p.to_local().numel() * 4 for p in model.parameters()),  # type: ignore[attr-defined]
            "predicted_param_bytes": fsdp_rank_bytes(shapes, shard_size, coord[1]).parameters,
            "coordinate": tuple(coord), "params": full if rank == 0 else None}


@dataclass
class HSDPRun:
    """What a real HSDP run measured next to the prediction (bytes per step, per rank)."""

    replicate: int
    shard_size: int
    coordinates: list[tuple[int, int]]  # (replica, shard index) of each rank
    param_bytes: list[int]  # measured: bytes of each rank's local parameter shards
    predicted_param_bytes: list[int]
    measured: list[dict[str, dict[str, int]]]  # per rank: mesh dim -> collective -> bytes
    predicted: dict[str, dict[str, int]]  # the same for every rank
    max_abs_diff: float  # |HSDP - one process| over every parameter element

    def rows(self) -> list[dict[str, object]]:
        """One row per rank, mesh dimension and collective: measured, predicted, error."""
        out: list[dict[str, object]] = []
        for rank, measured in enumerate(self.measured):
            for dim in ("shard", "replicate"):
                for op, want in self.predicted[dim].items():
                    got = measured[dim].get(op, 0)
                    out.append({"rank": rank, "mesh dim": dim, "collective": op,
                                "measured_B": got, "predicted_B": want,
                                "error_%": round(100 * (got - want) / want, 2)})
        return out


def run_hsdp(world_size: int = 4, replicate: int = 2, *, steps: int = 3, global_batch: int = 8,
             lr: float = 1e-2, seed: int = 0, timeout_s: float = 120.0) -> HSDPRun:
    """HSDP over (replicate, world_size / replicate) gloo ranks, measured and predicted."""
    from dpsim.runtime.launch import launch

    require_int("world_size", world_size, 2, 8)
    require_int("replicate", replicate, 1, world_size)
    if world_size % replicate:
        raise ValueError(f"replicate={replicate} does not divide world_size={world_size}; "
                         f"allowed: a divisor of {world_size}")
    require_int("steps", steps, 1, 1000)
    require_int("global_batch", global_batch, world_size, 1 << 16)
    if global_batch % world_size:
        raise ValueError(f"global_batch={global_batch} does not split over world_size="
                         f"{world_size}; allowed: a multiple of {world_size}")
    ranks = launch(hsdp_rank, world_size, args=(replicate, steps, global_batch, lr, seed),
                   backend="gloo", timeout_s=timeout_s)
    shard_size = world_size // replicate
    predicted: dict[str, dict[str, int]] = {"shard": {}, "replicate": {}}
    units = ranks[0]["units"]  # the blocks, then the root (gathered once: see fsdp_builders.shard)
    for i, unit in enumerate(units):
        gathers = 1 if i == len(units) - 1 else 2
        for dim, ops in predicted_collective_bytes(unit, replicate, shard_size,
                                                   gathers=gathers).items():
            for op, nbytes in ops.items():
                predicted[dim][op] = predicted[dim].get(op, 0) + nbytes
    ref, _ = train_one_process(MODEL, steps, global_batch, lr, seed)
    params = ranks[0]["params"]
    diff = max(float((params[k] - v).abs().max()) for k, v in ref.items())
    return HSDPRun(replicate, shard_size, [r["coordinate"] for r in ranks],
                   [r["param_bytes"] for r in ranks], [r["predicted_param_bytes"] for r in ranks],
                   [r["measured"] for r in ranks], predicted, diff)
