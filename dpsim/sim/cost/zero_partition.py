"""ZeRO-1 as torch does it: ZeroRedundancyOptimizer gives whole parameters to ranks.

`torch.distributed.optim.ZeroRedundancyOptimizer` sorts each parameter group's tensors by
size, largest first, and gives each to the rank with the fewest elements so far (the lowest
rank on a tie). A rank keeps optimizer state only for its own tensors, so its bytes are
those tensors' moments plus a `step` per tensor, not an even 1/N slice of the state.
"""

from __future__ import annotations

from typing import Annotated

from dpsim.sim.checks import Each, Int
from dpsim.sim.cost.memory import STEP_BYTES, Dtype, Optimizer
from dpsim.sim.limits import MAX_COUNT, MAX_TENSORS, WorldSize
from dpsim.sim.workload import DTYPE_BYTES

# elements of each parameter tensor, in registration order
Numels = Annotated[list[int], Each(Int(0, MAX_COUNT), 0, MAX_TENSORS)]

_MOMENTS = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}


def zero1_partition(param_numels: Numels, world_size: WorldSize) -> list[list[int]]:
    """Indices of the parameter tensors each rank owns (one parameter group)."""
    owned: list[list[int]] = [[] for _ in range(world_size)]
    sizes = [0] * world_size
    # Python's sort is stable: equal sizes keep their registration order, as in torch
    for i in sorted(range(len(param_numels)), key=lambda k: param_numels[k], reverse=True):
        rank = sizes.index(min(sizes))
        owned[rank].append(i)
        sizes[rank] += param_numels[i]
    return owned


def zero1_optimizer_bytes(param_numels: Numels, world_size: WorldSize,
                          optimizer: Optimizer = "adam", state_dtype: Dtype = "fp32"
                          ) -> list[int]:
    """Optimizer-state bytes each rank holds under ZeroRedundancyOptimizer."""
    owned = zero1_partition(param_numels, world_size)
    steps = STEP_BYTES if optimizer in ("adam", "adamw") else 0
    width = _MOMENTS[optimizer] * DTYPE_BYTES[state_dtype]
    return [sum(width * param_numels[i] + steps for i in idx) for idx in owned]
