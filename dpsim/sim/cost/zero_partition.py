"""ZeRO-1 as torch does it: ZeroRedundancyOptimizer gives whole parameters to ranks.

`torch.distributed.optim.ZeroRedundancyOptimizer` sorts each parameter group's tensors by
size, largest first, and gives each to the rank with the fewest elements so far (the lowest
rank on a tie). A rank keeps optimizer state only for its own tensors, so its bytes are
those tensors' moments plus a `step` per tensor, not an even 1/N slice of the state.
"""

from __future__ import annotations

from dpsim.sim.checks import require_choice, require_int, require_type
from dpsim.sim.cost.memory import OPTIMIZERS, STEP_BYTES
from dpsim.sim.limits import MAX_COUNT, MAX_TENSORS, MAX_WORLD_SIZE
from dpsim.sim.workload import DTYPE_BYTES

_MOMENTS = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}


def zero1_partition(param_numels: list[int], world_size: int) -> list[list[int]]:
    """Indices of the parameter tensors each rank owns (one parameter group)."""
    require_type("param_numels", param_numels, (list, tuple))
    require_int("param_numels (length)", len(param_numels), 0, MAX_TENSORS)
    for i, n in enumerate(param_numels):
        require_int(f"param_numels[{i}]", n, 0, MAX_COUNT)
    require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    owned: list[list[int]] = [[] for _ in range(world_size)]
    sizes = [0] * world_size
    # Python's sort is stable: equal sizes keep their registration order, as in torch
    for i in sorted(range(len(param_numels)), key=lambda k: param_numels[k], reverse=True):
        rank = sizes.index(min(sizes))
        owned[rank].append(i)
        sizes[rank] += param_numels[i]
    return owned


def zero1_optimizer_bytes(param_numels: list[int], world_size: int, optimizer: str = "adam",
                          state_dtype: str = "fp32") -> list[int]:
    """Optimizer-state bytes each rank holds under ZeroRedundancyOptimizer."""
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_choice("state_dtype", state_dtype, DTYPE_BYTES)
    owned = zero1_partition(param_numels, world_size)
    steps = STEP_BYTES if optimizer in ("adam", "adamw") else 0
    width = _MOMENTS[optimizer] * DTYPE_BYTES[state_dtype]
    return [sum(width * param_numels[i] + steps for i in idx) for idx in owned]
