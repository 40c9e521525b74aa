"""DataParallel simulated: one process drives N devices, one Python thread per device.

`config` (DPConfig), `closed_form` (chunks, bytes at the loss), `step` (`simulate`: the
eight phases of one step), `result` (its typed state, `step_result`, `summary`),
`strategy` (DPStrategy for the planner). The names below are the package's public API.
"""

from dpsim.sim.limits import MAX_HOST_US, MAX_OUT_FEATURES
from dpsim.sim.strategies.dp.closed_form import (
    activation_bytes_per_layer,
    bytes_at_loss,
    device0_extra_bytes,
    device_batch_sizes,
    dtype_scale,
    scatter_sizes,
    with_output_features,
)
from dpsim.sim.strategies.dp.config import INPUT_PLACES, DPConfig
from dpsim.sim.strategies.dp.result import DPState, DPSummary, step_result, summary
from dpsim.sim.strategies.dp.step import PHASES, simulate
from dpsim.sim.strategies.dp.strategy import STRATEGY, DPStrategy

__all__ = [
    "INPUT_PLACES", "MAX_HOST_US", "MAX_OUT_FEATURES", "PHASES", "STRATEGY", "DPConfig",
    "DPState", "DPStrategy", "DPSummary",
    "activation_bytes_per_layer", "bytes_at_loss", "device0_extra_bytes", "device_batch_sizes",
    "dtype_scale", "scatter_sizes", "simulate", "step_result", "summary",
    "with_output_features",
]
