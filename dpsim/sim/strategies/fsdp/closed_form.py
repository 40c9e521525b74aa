"""FSDP / ZeRO in closed form: the bytes one step communicates.

`fsdp.simulate` runs the step unit by unit; the tests check its communication volume
against `communication_bytes_per_step`.
"""

from __future__ import annotations

from typing import Annotated

from dpsim.sim.checks import Int
from dpsim.sim.limits import MAX_DTYPE_BYTES, MAX_EXACT_COUNT, WorldSize

ModelParams = Annotated[int, Int(0, MAX_EXACT_COUNT)]  # parameters of a model
ParamBytes = Annotated[int, Int(1, MAX_DTYPE_BYTES)]  # bytes of one parameter as sent
STAGE = Int(0, 3)  # a ZeRO stage: one of memory.ZERO_STAGES (an int: refuses True)
Stage = Annotated[int, STAGE]


def communication_bytes_per_step(n_params: ModelParams, world_size: WorldSize, stage: Stage,
                                 bytes_per_param: ParamBytes = 2,
                                 reshard_after_forward: bool = True) -> int:
    """Communication volume per step, in bytes: 3x the model for FSDP, 2x for DDP.

    The volume adds the full-tensor size of every collective, an all-reduce counting
    twice (it is a reduce-scatter plus an all-gather). Stage 3 all-gathers the parameters
    in forward and again in backward and reduce-scatters the gradients (3x; 2x without
    reshard_after_forward); stages 1-2 reduce-scatter gradients and all-gather the updated
    parameters (2x); stage 0 all-reduces gradients (2x). With a ring each device sends
    (N-1)/N of the volume. 0 for one device.
    """
    if world_size == 1:
        return 0
    model = n_params * bytes_per_param
    if stage == 3 and reshard_after_forward:
        return 3 * model
    return 2 * model
