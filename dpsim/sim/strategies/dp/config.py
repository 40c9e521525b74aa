"""DataParallel's config: one `nn.DataParallel` step, and the bounds of its host costs."""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.sim.checks import require_choice, require_finite, require_int
from dpsim.sim.cost.memory import OPTIMIZERS
from dpsim.sim.limits import MAX_HOST_US
from dpsim.sim.workload import DTYPE_BYTES

INPUT_PLACES = ("device0", "host")
# Host costs in microseconds are bounded so that a step simulates in well under a second:
# the GIL model hands the lock over every 5 ms, so longer Python segments cost more steps.


@dataclass(frozen=True)
class DPConfig:
    """One `nn.DataParallel` training step."""

    n_devices: int = 4  # len(device_ids): devices one process drives
    batch_size: int = 128  # the global batch, split across devices by scatter
    optimizer: str = "adam"  # one of memory.OPTIMIZERS, stepped on device 0 only
    dtype: str = "fp32"  # parameters, activations and gradients
    input_on: str = "device0"  # the batch before forward: "device0" (x.cuda()) or "host"
    python_op_us: float | None = None  # host cost per operator; None: device.op_overhead_us
    op_gil_share: float = 0.6  # share of that cost in Python (GIL held); rest C++ launch
    replicate_us_per_module: float = 20.0  # Python cost of copying one module for one device
    thread_start_us: float = 60.0  # parallel_apply starts one thread per device per step

    def __post_init__(self) -> None:
        require_int("n_devices", self.n_devices, 1, 1024)
        require_int("batch_size", self.batch_size, 1, 1 << 24)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_choice("dtype", self.dtype, DTYPE_BYTES)
        require_choice("input_on", self.input_on, INPUT_PLACES)
        if self.python_op_us is not None:
            require_finite("python_op_us", self.python_op_us, 0, MAX_HOST_US)
        require_finite("op_gil_share", self.op_gil_share, 0, 1)
        require_finite("replicate_us_per_module", self.replicate_us_per_module, 0, MAX_HOST_US)
        require_finite("thread_start_us", self.thread_start_us, 0, MAX_HOST_US)
