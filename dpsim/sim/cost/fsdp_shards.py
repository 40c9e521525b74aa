"""FSDP2 shards: each parameter's dim 0 cut into chunks over the ranks, padded to equal size.

`fully_shard` splits every parameter with `torch.chunk` along dim 0 (ceil(dim0 / N) rows
per rank, fewer or none at the end) and pads each local shard to the first rank's size;
these functions give the rows, elements and bytes per rank that cut leaves
(`labs.ch06_fsdp.fsdp_train` measures them against real shards).
"""

from __future__ import annotations

from dpsim.sim.checks import require_bool, require_choice, require_int, require_type
from dpsim.sim.cost.memory import OPTIMIZERS, MemoryBreakdown, optimizer_state_bytes
from dpsim.sim.limits import MAX_COUNT, MAX_NDIM, MAX_WORLD_SIZE
from dpsim.sim.workload import DTYPE_BYTES


def fsdp_shard_rows(dim0: int, world_size: int, rank: int) -> int:
    """Rows of a parameter's dim 0 that `rank` holds: torch.chunk into ceil(dim0/N) rows."""
    require_int("dim0", dim0, 0, MAX_COUNT)
    _check_rank(world_size, rank)
    return _rows(dim0, world_size, rank)


def _check_rank(world_size: int, rank: int) -> None:
    require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    require_int("rank", rank, 0, world_size - 1)


def _rows(dim0: int, world_size: int, rank: int) -> int:
    chunk = -(-dim0 // world_size)
    return max(0, min(chunk, dim0 - rank * chunk))


def _rest(shape: tuple[int, ...], field: str = "shape") -> tuple[int, int]:
    """(dim 0, product of the other dimensions) of a shape (() is a scalar: (1, 1))."""
    require_type(field, shape, (tuple, list))
    if len(shape) > MAX_NDIM:
        raise ValueError(f"{field}=<{len(shape)} dimensions> has too many dimensions; "
                         f"allowed: at most {MAX_NDIM}")
    dims = tuple(shape) or (1,)
    for i, d in enumerate(dims):
        require_int(f"{field}[{i}]", d, 0, MAX_COUNT)
    rest = 1
    for d in dims[1:]:
        rest *= d
    require_int(f"{field} (elements)", dims[0] * rest, 0, MAX_COUNT)
    return dims[0], rest


def fsdp_shard_numel(shape: tuple[int, ...], world_size: int, rank: int) -> int:
    """Elements of `rank`'s shard of a parameter of `shape` (unpadded, what .to_local() holds)."""
    dim0, rest = _rest(shape)
    _check_rank(world_size, rank)
    return _rows(dim0, world_size, rank) * rest


def fsdp_padded_shard_numel(shape: tuple[int, ...], world_size: int) -> int:
    """Elements each rank allocates for a parameter's shard: ceil(dim0/N) rows, padding included."""
    dim0, rest = _rest(shape)
    require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    return -(-dim0 // world_size) * rest


def fsdp_rank_bytes(param_shapes: list[tuple[int, ...]], world_size: int, rank: int, *,
                    dtype: str = "fp32", optimizer: str = "adam", padded: bool = False
                    ) -> MemoryBreakdown:
    """Model-state bytes `rank` holds after a step of FSDP2 (`fully_shard`) training.

    padded=False counts the local shards (`DTensor.to_local()`); padded=True counts the
    memory allocated: parameters and gradients live in buffers of ceil(dim0/N) rows per
    parameter on every rank, while optimizer moments are the size of the local shard.
    Adam's `step` is a 4-byte tensor per parameter.
    """
    require_type("param_shapes", param_shapes, (tuple, list))
    _check_rank(world_size, rank)
    require_choice("dtype", dtype, DTYPE_BYTES)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_bool("padded", padded)
    width = DTYPE_BYTES[dtype]
    local = held = 0
    for i, shape in enumerate(param_shapes):
        dim0, rest = _rest(shape, f"param_shapes[{i}]")
        local += _rows(dim0, world_size, rank) * rest
        held += -(-dim0 // world_size) * rest if padded else 0
    require_int("param_shapes (elements of the local shards)", local, 0, MAX_COUNT)
    held = held if padded else local
    return MemoryBreakdown(
        parameters=held * width,
        gradients=held * width,
        optimizer=optimizer_state_bytes(local, len(param_shapes), optimizer, False, dtype),
    )
