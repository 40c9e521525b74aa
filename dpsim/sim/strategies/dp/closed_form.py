"""DataParallel in closed form: the chunks `torch.chunk` cuts, a classifier's output size,
and the bytes each device holds when the loss is computed.

`bytes_at_loss` is what `dp.simulate`'s memory timeline must show at the loss (the tests
check one against the other); `dp.simulate` runs the step over time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from dpsim.sim.checks import Int
from dpsim.sim.cost.memory import optimizer_state_bytes
from dpsim.sim.limits import MAX_OUT_FEATURES, Samples, WorldSize
from dpsim.sim.strategies.dp.config import DPConfig
from dpsim.sim.strategies.inputs import shown
from dpsim.sim.workload import DTYPE_BYTES, Workload


def with_output_features(workload: Workload,
                         out_features: Annotated[int, Int(1, MAX_OUT_FEATURES)]) -> Workload:
    """`workload` whose last layer outputs `out_features` values per sample (classifier)."""
    if not workload.layers:
        raise ValueError(f"workload={shown(workload)} has no layers; allowed: a workload with "
                         "at least one layer")
    width = DTYPE_BYTES[workload.dtype]
    last = replace(workload.layers[-1], output_bytes=out_features * width)
    return replace(workload, layers=(*workload.layers[:-1], last),
                   loss_bytes=out_features * width + 8,
                   name=f"{workload.name} ({out_features} outputs)")


def scatter_sizes(batch_size: Samples, n_devices: WorldSize) -> list[int]:
    """Samples per chunk as `torch.chunk(batch, n_devices)` cuts them (empty chunks dropped).

    Chunks hold ceil(B/N) samples and the last one the rest, so there may be fewer than
    N chunks: B=10, N=4 -> [3, 3, 3, 1]; B=5, N=4 -> [2, 2, 1]; B=2, N=4 -> [1, 1].
    """
    size = -(-batch_size // n_devices)
    return [min(size, batch_size - start) for start in range(0, batch_size, size)]


def device_batch_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Samples each of the N devices gets (0 for a device DataParallel leaves idle)."""
    sizes = scatter_sizes(batch_size, n_devices)
    return sizes + [0] * (n_devices - len(sizes))


def dtype_scale(workload: Workload, dtype: str) -> float:
    """Bytes of a tensor in `dtype` per byte in the workload's own dtype."""
    return DTYPE_BYTES[dtype] / DTYPE_BYTES[workload.dtype]


def activation_bytes_per_layer(workload: Workload, dtype: str) -> list[float]:
    """Bytes each layer saves for backward per sample, in `dtype`, the input excluded.

    The first layer's saved input is the batch itself, which DP counts as "input".
    """
    return _saved_per_sample(workload, dtype_scale(workload, dtype))


def bytes_at_loss(workload: Workload, config: DPConfig) -> list[dict[str, int]]:
    """Bytes per category each device holds when the loss is computed (steady state).

    Device 0 keeps the optimizer state, the gathered outputs, what the loss saves for
    backward and (input_on="device0") the whole batch; every device that got a chunk
    holds a replica of the parameters, its input chunk and its activations.
    """
    chunks = scatter_sizes(config.batch_size, config.n_devices)
    sizes = chunks + [0] * (config.n_devices - len(chunks))
    used = len(chunks)
    scale = dtype_scale(workload, config.dtype)
    act_per_sample = sum(_saved_per_sample(workload, scale))
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
    if config.n_devices < 2:
        raise ValueError(f"n_devices={config.n_devices} (config.n_devices) leaves no device 1 "
                         "to compare with; allowed >= 2")
    rows = bytes_at_loss(workload, config)
    return {cat: rows[0][cat] - rows[1][cat] for cat in rows[0]}


def _saved_per_sample(workload: Workload, scale: float) -> list[float]:
    acts = [layer.activation_bytes * scale for layer in workload.layers]
    if acts:
        acts[0] -= min(acts[0], float(workload.input_bytes))
    return acts
