"""DataParallel's config: one `nn.DataParallel` step, and the bounds of its host costs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import Int, OneOf, Real, check_fields
from dpsim.sim.cost.memory import OPTIMIZERS
from dpsim.sim.limits import MAX_DEVICES_PER_NODE, MAX_HOST_US, Fraction, Samples
from dpsim.sim.workload import DTYPE_BYTES

INPUT_PLACES = ("device0", "host")
# Host costs in microseconds are bounded so that a step simulates in well under a second:
# the GIL model hands the lock over every 5 ms, so longer Python segments cost more steps.
HostUs = Annotated[float, Real(0, MAX_HOST_US)]  # microseconds of host (Python) time


@dataclass(frozen=True)
class DPConfig:
    """One `nn.DataParallel` training step."""

    # len(device_ids): devices one process drives (at most one node's)
    n_devices: Annotated[int, Int(1, MAX_DEVICES_PER_NODE)] = 4
    batch_size: Samples = 128  # the global batch, split across devices by scatter
    # one of memory.OPTIMIZERS, stepped on device 0 only
    optimizer: Annotated[str, OneOf(OPTIMIZERS)] = "adam"
    dtype: Annotated[str, OneOf(tuple(DTYPE_BYTES))] = "fp32"  # parameters, activations, grads
    # the batch before forward: "device0" (x.cuda()) or "host"
    input_on: Annotated[str, OneOf(INPUT_PLACES)] = "device0"
    python_op_us: HostUs | None = None  # host cost per operator; None: device.op_overhead_us
    op_gil_share: Fraction = 0.6  # share of that cost in Python (GIL held); rest C++ launch
    replicate_us_per_module: HostUs = 20.0  # Python cost of copying one module for one device
    thread_start_us: HostUs = 60.0  # parallel_apply starts one thread per device per step

    def __post_init__(self) -> None:
        check_fields(self)
