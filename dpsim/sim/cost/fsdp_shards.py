"""FSDP2 shards: each parameter's dim 0 cut into chunks over the ranks, padded to equal size.

`fully_shard` splits every parameter with `torch.chunk` along dim 0 (ceil(dim0 / N) rows
per rank, fewer or none at the end) and pads each local shard to the first rank's size;
these functions give the rows, elements and bytes per rank that cut leaves
(`dpsim.runtime.fsdp_run` puts them beside a real run's shards, which
`dpsim.runtime.fsdp_builders.measure_shards` reads).
"""

from __future__ import annotations

from typing import Annotated

from dpsim.sim.checks import Each, Int, require_int
from dpsim.sim.cost.memory import Dtype, MemoryBreakdown, Optimizer, optimizer_state_bytes
from dpsim.sim.limits import MAX_COUNT, MAX_NDIM, MAX_TENSORS, Count, DeviceIndex, WorldSize
from dpsim.sim.workload import DTYPE_BYTES

# a parameter's shape (() is a scalar), each dimension 0..MAX_COUNT
Shape = Annotated[tuple[int, ...], Each(Int(0, MAX_COUNT), 0, MAX_NDIM)]
Shapes = Annotated[list[tuple[int, ...]], Each(Each(Int(0, MAX_COUNT), 0, MAX_NDIM), 0,
                                              MAX_TENSORS)]


def fsdp_shard_rows(dim0: Count, world_size: WorldSize, rank: DeviceIndex) -> int:
    """Rows of a parameter's dim 0 that `rank` holds: torch.chunk into ceil(dim0/N) rows."""
    require_int("rank", rank, 0, world_size - 1)
    return _rows(dim0, world_size, rank)


def _rows(dim0: int, world_size: int, rank: int) -> int:
    chunk = -(-dim0 // world_size)
    return max(0, min(chunk, dim0 - rank * chunk))


def _rest(shape: tuple[int, ...]) -> tuple[int, int]:
    """(dim 0, product of the other dimensions) of a shape (() is a scalar: (1, 1))."""
    dims = tuple(shape) or (1,)
    rest = 1
    for d in dims[1:]:
        rest *= d
    return dims[0], rest


def _elements(field: str, shape: tuple[int, ...]) -> tuple[int, int]:
    """`_rest`, refusing a shape of more than MAX_COUNT elements (named `field`)."""
    dim0, rest = _rest(shape)
    if dim0 * rest > MAX_COUNT:
        raise ValueError(f"{field} (elements)={dim0 * rest} is out of range; allowed: "
                         f"<= {MAX_COUNT}")
    return dim0, rest


def fsdp_shard_numel(shape: tuple[int, ...], world_size: int, rank: int) -> int:
    """Elements of `rank`'s shard of a parameter of `shape` (unpadded, what .to_local() holds)."""
    dim0, rest = _rest(shape)
    return _rows(dim0, world_size, rank) * rest


def fsdp_padded_shard_numel(shape: Shape, world_size: WorldSize) -> int:
    """Elements each rank allocates for a parameter's shard: ceil(dim0/N) rows, padding included."""
    dim0, rest = _elements("shape", shape)
    return -(-dim0 // world_size) * rest


def fsdp_rank_bytes(param_shapes: Shapes, world_size: WorldSize, rank: DeviceIndex, *,
                    dtype: Dtype = "fp32", optimizer: Optimizer = "adam", padded: bool = False
                    ) -> MemoryBreakdown:
    """Model-state bytes `rank` holds after a step of FSDP2 (`fully_shard`) training.

    padded=False counts the local shards (`DTensor.to_local()`); padded=True counts the
    memory allocated: parameters and gradients live in buffers of ceil(dim0/N) rows per
    parameter on every rank, while optimizer moments are the size of the local shard.
    Adam's `step` is a 4-byte tensor per parameter.
    """
    require_int("rank", rank, 0, world_size - 1)
    width = DTYPE_BYTES[dtype]
    local = held = 0
    for i, shape in enumerate(param_shapes):
        dim0, rest = _elements(f"param_shapes[{i}]", shape)
        local += _rows(dim0, world_size, rank) * rest
        held += -(-dim0 // world_size) * rest if padded else 0
    require_int("param_shapes (elements of the local shards)", local, 0, MAX_COUNT)
    held = held if padded else local
    return MemoryBreakdown(
        parameters=held * width,
        gradients=held * width,
        optimizer=optimizer_state_bytes(local, len(param_shapes), optimizer, False, dtype),
    )
