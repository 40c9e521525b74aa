"""FSDP / ZeRO simulated: one training step, unit by unit, on one representative device.

`config` (FSDPConfig), `closed_form` (the bytes a step communicates), `units` (layers
grouped into FSDP units), `step` (`simulate`: the event loop `FSDPStep`, its typed state,
`step_result`, `summary`, `compare_stages`), `strategy` (ZeRO-1/2/3 for the planner),
`hsdp` (FSDP in shard groups, replicated across them). The names below are the
package's public API (HSDP's are in `fsdp.hsdp`).
"""

from dpsim.sim.strategies.fsdp.closed_form import communication_bytes_per_step
from dpsim.sim.strategies.fsdp.config import FSDP_PRECISIONS, FSDPConfig
from dpsim.sim.strategies.fsdp.step import (
    FSDPState,
    FSDPStep,
    FSDPSummary,
    compare_stages,
    simulate,
    step_result,
    summary,
)
from dpsim.sim.strategies.fsdp.strategy import ZERO1, ZERO2, ZERO3, FSDPStrategy
from dpsim.sim.strategies.fsdp.units import Unit, build_units

__all__ = [
    "FSDP_PRECISIONS", "ZERO1", "ZERO2", "ZERO3", "FSDPConfig", "FSDPState", "FSDPStep",
    "FSDPStrategy", "FSDPSummary", "Unit", "build_units", "communication_bytes_per_step",
    "compare_stages", "simulate", "step_result", "summary",
]
