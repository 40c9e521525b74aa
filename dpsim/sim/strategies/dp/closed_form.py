"""DataParallel in closed form: the chunks `torch.chunk` cuts, a classifier's output size,
and the bytes each device holds when the loss is computed.

`bytes_at_loss` is what `dp.simulate`'s memory timeline must show at the loss (the tests
check one against the other); `dp.simulate` runs the step over time.
"""

from __future__ import annotations

from dataclasses import replace

from dpsim.sim.checks import require_choice, require_int
from dpsim.sim.cost.memory import optimizer_state_bytes
from dpsim.sim.limits import MAX_BATCH, MAX_OUT_FEATURES, MAX_WORLD_SIZE
from dpsim.sim.strategies.dp.config import DPConfig
from dpsim.sim.strategies.inputs import require_config, require_workload
from dpsim.sim.workload import DTYPE_BYTES, Workload


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
    require_int("n_devices", n_devices, 1, MAX_WORLD_SIZE)
    return _chunks(batch_size, n_devices)


def device_batch_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Samples each of the N devices gets (0 for a device DataParallel leaves idle)."""
    sizes = scatter_sizes(batch_size, n_devices)
    return sizes + [0] * (n_devices - len(sizes))


def dtype_scale(workload: Workload, dtype: str) -> float:
    """Bytes of a tensor in `dtype` per byte in the workload's own dtype."""
    require_workload(workload, runnable=False)
    require_choice("dtype", dtype, DTYPE_BYTES)
    return _scale(workload, dtype)


def activation_bytes_per_layer(workload: Workload, dtype: str) -> list[float]:
    """Bytes each layer saves for backward per sample, in `dtype`, the input excluded.

    The first layer's saved input is the batch itself, which DP counts as "input".
    """
    return _saved_per_sample(workload, dtype_scale(workload, dtype))  # checks both


def bytes_at_loss(workload: Workload, config: DPConfig) -> list[dict[str, int]]:
    """Bytes per category each device holds when the loss is computed (steady state).

    Device 0 keeps the optimizer state, the gathered outputs, what the loss saves for
    backward and (input_on="device0") the whole batch; every device that got a chunk
    holds a replica of the parameters, its input chunk and its activations.
    """
    require_workload(workload, runnable=False)
    require_config(config, DPConfig)
    return _bytes_at_loss(workload, config)


def device0_extra_bytes(workload: Workload, config: DPConfig) -> dict[str, int]:
    """Bytes per category device 0 holds at the loss beyond device 1 (needs n_devices >= 2)."""
    require_config(config, DPConfig)
    require_int("n_devices", config.n_devices, 2)
    require_workload(workload, runnable=False)
    rows = _bytes_at_loss(workload, config)
    return {cat: rows[0][cat] - rows[1][cat] for cat in rows[0]}


def _chunks(batch_size: int, n_devices: int) -> list[int]:
    size = -(-batch_size // n_devices)
    return [min(size, batch_size - start) for start in range(0, batch_size, size)]


def _scale(workload: Workload, dtype: str) -> float:
    return DTYPE_BYTES[dtype] / DTYPE_BYTES[workload.dtype]


def _saved_per_sample(workload: Workload, scale: float) -> list[float]:
    acts = [layer.activation_bytes * scale for layer in workload.layers]
    if acts:
        acts[0] -= min(acts[0], float(workload.input_bytes))
    return acts


def _bytes_at_loss(workload: Workload, config: DPConfig) -> list[dict[str, int]]:
    chunks = _chunks(config.batch_size, config.n_devices)
    sizes = chunks + [0] * (config.n_devices - len(chunks))
    used = len(chunks)
    scale = _scale(workload, config.dtype)
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
