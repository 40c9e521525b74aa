"""The model against published measurements: cited datasets (`data/`), the fit of the free
constants on half of the points, the error on the other half, and the report
(`python -m dpsim validate`). Outside the simulator it is reached as `dpsim.sim.fidelity`
through the face (`from dpsim.sim import fidelity`); the names below are what it offers.
"""

from dpsim.sim.fidelity import (
    collectives,
    ddp,
    fsdp_scale,
    leave_run_out,
    memory,
    resnet_scaling,
    zero_paper,
)
from dpsim.sim.fidelity.collective_misses import MODEL_NOTE, WHY_DEFAULT, WHY_RUN
from dpsim.sim.fidelity.goals import RESNET_EVERY, ZERO_PAPER_EVERY, goal, goals

__all__ = [
    "MODEL_NOTE", "RESNET_EVERY", "WHY_DEFAULT", "WHY_RUN", "ZERO_PAPER_EVERY", "collectives",
    "ddp", "fsdp_scale", "goal", "goals", "leave_run_out", "memory", "resnet_scaling",
    "zero_paper",
]
