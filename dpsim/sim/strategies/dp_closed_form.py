"""DataParallel in closed form: its config, the chunks `torch.chunk` cuts, a classifier's
output size, and the bytes each device holds when the loss is computed.

`bytes_at_loss` is what `dp.simulate`'s memory timeline must show at the loss (the tests
check one against the other); `dp.simulate` runs the step over time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dpsim.sim.cost.memory import OPTIMIZERS, optimizer_state_bytes
from dpsim.sim.strategies.inputs import MAX_BATCH, MAX_DEVICES, require_config, require_workload
from dpsim.sim.validation import require_choice, require_finite, require_int
from dpsim.sim.workload import DTYPE_BYTES, Workload

INPUT_PLACES = ("device0", "host")
# Host costs in microseconds are bounded so that a step simulates in well under a second:
# the GIL model hands the lock over every 5 ms, so longer Python segments cost more steps.
MAX_HOST_US = 10_000.0  # 10 ms per operator, module copy or thread start (real: 5-100 us)
MAX_OUT_FEATURES = 1 << 32  # a classifier's outputs per sample


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


def with_output_features(workload: Workload, out_features: int) -> Workload:
    """`workload` whose last layer outputs `out_features` values per sample (classifier)."""
    require_workload(workload, runnable=False)
    require_int("out_features", out_features, 1, MAX_OUT_FEATURES)
    if not workload.layers:
        raise ValueError("workload has no layers; give a workload with at least one layer")
    width = DTYPE_BYTES[workload.dtype]
    last = replace(workload.layers[-1], output_bytes=out_features * width)
    return replace(workload, layers=(*workload.layers[:-1], last),
                   loss_bytes=out_features * width + 8,
                   name=f"{workload.name} ({out_features} outputs)")


def scatter_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Samples per chunk as `torch.chunk(batch, n_devices)` cuts them (empty chunks dropped).

    Chunks hold ceil(B/N) samples and the last one the rest, so there may be fewer than
    N chunks: B=10, N=4 -> [3, 3, 3, 1]; B=5, N=4 -> [2, 2, 1]; B=2, N=4 -> [1, 1].
    """
    require_int("batch_size", batch_size, 1, MAX_BATCH)
    require_int("n_devices", n_devices, 1, MAX_DEVICES)
    size = -(-batch_size // n_devices)
    return [min(size, batch_size - start) for start in range(0, batch_size, size)]


def device_batch_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Samples each of the N devices gets (0 for a device DataParallel leaves idle)."""
    sizes = scatter_sizes(batch_size, n_devices)
    return sizes + [0] * (n_devices - len(sizes))


def dtype_scale(workload: Workload, dtype: str) -> float:
    """Bytes of a tensor in `dtype` per byte in the workload's own dtype."""
    require_workload(workload, runnable=False)
    require_choice("dtype", dtype, DTYPE_BYTES)
    return DTYPE_BYTES[dtype] / DTYPE_BYTES[workload.dtype]


def activation_bytes_per_layer(workload: Workload, dtype: str) -> list[float]:
    """Bytes each layer saves for backward per sample, in `dtype`, the input excluded.

    The first layer's saved input is the batch itself, which DP counts as "input".
    """
    scale = dtype_scale(workload, dtype)  # checks both
    acts = [layer.activation_bytes * scale for layer in workload.layers]
    if acts:
        acts[0] -= min(acts[0], float(workload.input_bytes))
    return acts


def bytes_at_loss(workload: Workload, config: DPConfig) -> list[dict[str, int]]:
    """Bytes per category each device holds when the loss is computed (steady state).

    Device 0 keeps the optimizer state, the gathered outputs, what the loss saves for
    backward and (input_on="device0") the whole batch; every device that got a chunk
    holds a replica of the parameters, its input chunk and its activations.
    """
    require_workload(workload, runnable=False)
    require_config(config, DPConfig)
    sizes = device_batch_sizes(config.batch_size, config.n_devices)
    used = sum(1 for b in sizes if b)
    scale = dtype_scale(workload, config.dtype)
    act_per_sample = sum(activation_bytes_per_layer(workload, config.dtype))
    b = config.batch_size
    params = DTYPE_BYTES[config.dtype] * workload.n_params
    rows = []
    for d, bd in enumerate(sizes):
        zero = d == 0
        rows.append({
            "parameters": params if zero or (used > 1 and bd) else 0,
            "optimizer": optimizer_state_bytes(workload.n_params, workload.n_param_tensors,
                                               config.optimizer, False, config.dtype)
            if zero else 0,
            "input": workload.input_bytes * (b if zero and config.input_on == "device0"
                                             else bd),
            "activations": int(act_per_sample * bd),
            "outputs": workload.output_bytes(bd, config.dtype) if zero and used == 1 else 0,
            "gathered": workload.output_bytes(b, config.dtype) if zero and used > 1 else 0,
            "loss": int(workload.loss_bytes * b * scale) if zero else 0,
            "gradients": 0,
        })
    return rows


def device0_extra_bytes(workload: Workload, config: DPConfig) -> dict[str, int]:
    """Bytes per category device 0 holds at the loss beyond device 1 (needs n_devices >= 2)."""
    require_config(config, DPConfig)
    require_int("n_devices", config.n_devices, 2)
    rows = bytes_at_loss(workload, config)
    return {cat: rows[0][cat] - rows[1][cat] for cat in rows[0]}
