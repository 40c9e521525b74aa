"""Bytes per device: model states (parameters, gradients, optimizer) and activations.

Conventions: fp32 training keeps 4 B/param of parameters and of gradients; Adam keeps
two fp32 moments (8 B/param) and one fp32 `step` scalar per parameter tensor. Mixed
precision keeps 16-bit parameters and gradients and an fp32 master copy with the moments:
2 + 2 + 12 = 16 B/param (the ZeRO paper's K = 12). That is ZeRO's and Megatron's scheme;
torch's (autocast, FSDP2 MixedPrecisionPolicy: fp32 states, 4 + 4 + 8) is in `precision`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction

from dpsim.sim.checks import require_bool, require_choice, require_int, require_type
from dpsim.sim.limits import (
    MAX_COUNT,
    MAX_STATE_BYTES_PER_PARAM,
    MAX_TOTAL_BYTES,
    MAX_WORLD_SIZE,
)
from dpsim.sim.workload import DTYPE_BYTES, Workload

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations")
STEP_BYTES = 4  # torch.optim.Adam keeps `step` as a float32 tensor per parameter tensor


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per category on one device."""

    parameters: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0

    def __post_init__(self) -> None:
        for name in CATEGORIES:
            require_int(name, getattr(self, name), 0, MAX_TOTAL_BYTES)

    @property
    def model_states(self) -> int:
        """Parameters + gradients + optimizer state, in bytes."""
        return self.parameters + self.gradients + self.optimizer

    @property
    def total(self) -> int:
        """All categories, in bytes."""
        return self.model_states + self.activations

    def as_dict(self) -> dict[str, int]:
        """Category -> bytes."""
        return asdict(self)


def optimizer_state_bytes(
    n_params: int,
    n_param_tensors: int,
    optimizer: str,
    mixed_precision: bool = False,
    state_dtype: str = "fp32",
) -> int:
    """Bytes of optimizer state (plus the fp32 master copy under mixed precision).

    Without mixed precision the moments are stored in the parameters' dtype `state_dtype`.
    """
    require_int("n_params", n_params, 0, MAX_COUNT)
    require_int("n_param_tensors", n_param_tensors, 0, MAX_COUNT)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_bool("mixed_precision", mixed_precision)
    require_choice("state_dtype", state_dtype, DTYPE_BYTES)
    return _optimizer_state_bytes(n_params, n_param_tensors, optimizer, mixed_precision,
                                  state_dtype)


def _optimizer_state_bytes(n_params: int, n_param_tensors: int, optimizer: str,
                           mixed_precision: bool, state_dtype: str) -> int:
    moments = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}[optimizer]
    steps = n_param_tensors * STEP_BYTES if optimizer in ("adam", "adamw") else 0
    width = 4 if mixed_precision else DTYPE_BYTES[state_dtype]
    master = 4 * n_params if mixed_precision else 0
    return moments * width * n_params + steps + master


def model_state_bytes(
    n_params: int,
    n_param_tensors: int = 0,
    *,
    dtype: str = "fp32",
    optimizer: str = "adam",
    mixed_precision: bool = False,
) -> MemoryBreakdown:
    """Parameters, gradients and optimizer bytes for a model of `n_params` elements.

    With mixed_precision the working copy is `dtype` (bf16 or fp16) and the optimizer keeps
    an fp32 master copy; without it, everything is stored in `dtype`.
    """
    require_int("n_params", n_params, 0, MAX_COUNT)
    require_int("n_param_tensors", n_param_tensors, 0, MAX_COUNT)
    _check_states(dtype, optimizer, mixed_precision)
    return _model_state_bytes(n_params, n_param_tensors, dtype, optimizer, mixed_precision)


def _check_states(dtype: str, optimizer: str, mixed_precision: bool) -> None:
    require_choice("dtype", dtype, DTYPE_BYTES)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_bool("mixed_precision", mixed_precision)
    if mixed_precision and dtype == "fp32":
        raise ValueError("dtype='fp32' with mixed_precision=True; allowed: dtype 'bf16' or 'fp16'")


def _model_state_bytes(n_params: int, n_param_tensors: int, dtype: str, optimizer: str,
                       mixed_precision: bool) -> MemoryBreakdown:
    width = DTYPE_BYTES[dtype]
    return MemoryBreakdown(
        parameters=width * n_params,
        gradients=width * n_params,
        optimizer=_optimizer_state_bytes(n_params, n_param_tensors, optimizer,
                                         mixed_precision, dtype),
    )


def bytes_per_param(optimizer: str = "adam", mixed_precision: bool = False) -> int:
    """Model-state bytes per parameter (ignoring per-tensor `step` scalars): 16 for mixed Adam."""
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_bool("mixed_precision", mixed_precision)
    dtype = "bf16" if mixed_precision else "fp32"
    return _model_state_bytes(1, 0, dtype, optimizer, mixed_precision).model_states


def predict_single(
    workload: Workload,
    batch_size: int,
    *,
    optimizer: str = "adam",
    dtype: str = "fp32",
    mixed_precision: bool = False,
) -> MemoryBreakdown:
    """Peak-of-step memory on one device: model states plus the activations of a batch."""
    require_type("workload", workload, Workload)
    _check_states(dtype, optimizer, mixed_precision)
    act = workload.activation_bytes(batch_size, dtype)  # checks batch_size
    return _predict_single(workload, act, dtype, optimizer, mixed_precision)


def _predict_single(workload: Workload, activation_bytes: int, dtype: str, optimizer: str,
                    mixed_precision: bool) -> MemoryBreakdown:
    states = _model_state_bytes(workload.n_params, workload.n_param_tensors, dtype, optimizer,
                                mixed_precision)
    return MemoryBreakdown(states.parameters, states.gradients, states.optimizer,
                           activation_bytes)


def max_batch_size(
    workload: Workload,
    memory_bytes: int,
    *,
    optimizer: str = "adam",
    dtype: str = "fp32",
    mixed_precision: bool = False,
    limit: int = 1 << 20,
) -> int:
    """Largest batch (<= `limit`) whose predicted memory fits `memory_bytes` (0 if states don't)."""
    require_type("workload", workload, Workload)
    require_int("memory_bytes", memory_bytes, 0, MAX_COUNT)
    require_int("limit", limit, 0, MAX_COUNT)
    _check_states(dtype, optimizer, mixed_precision)
    per_sample = workload.activation_bytes(1, dtype)
    states = _predict_single(workload, 0, dtype, optimizer, mixed_precision).model_states
    if states > memory_bytes:
        return 0
    if per_sample == 0:
        return limit
    return min(limit, (memory_bytes - states) // per_sample)


ZERO_STAGES = (0, 1, 2, 3)


def zero_bytes_per_device(
    n_params: int,
    world_size: int,
    stage: int,
    *,
    param_bytes: int = 2,
    grad_bytes: int = 2,
    optimizer_bytes: int = 12,
) -> MemoryBreakdown:
    """Model states per device under ZeRO `stage` (0 = DDP), in bytes.

    Stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the
    parameters (FSDP's FULL_SHARD). Defaults are mixed-precision Adam (2 + 2 + 12);
    each of the three is 0..MAX_STATE_BYTES_PER_PARAM bytes per parameter.
    """
    require_int("n_params", n_params, 0, MAX_COUNT)
    _check_zero(world_size, stage, param_bytes, grad_bytes, optimizer_bytes)
    return _zero_states(n_params, world_size, stage, param_bytes, grad_bytes, optimizer_bytes)


def _check_zero(world_size: int, stage: int, param_bytes: int, grad_bytes: int,
                optimizer_bytes: int) -> None:
    require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    require_int("stage", stage)
    require_choice("stage", stage, ZERO_STAGES)
    require_int("param_bytes", param_bytes, 0, MAX_STATE_BYTES_PER_PARAM)
    require_int("grad_bytes", grad_bytes, 0, MAX_STATE_BYTES_PER_PARAM)
    require_int("optimizer_bytes", optimizer_bytes, 0, MAX_STATE_BYTES_PER_PARAM)


def _zero_states(n_params: int, n: int, stage: int, param_bytes: int, grad_bytes: int,
                 optimizer_bytes: int) -> MemoryBreakdown:
    return MemoryBreakdown(
        parameters=param_bytes * n_params // (n if stage >= 3 else 1),
        gradients=grad_bytes * n_params // (n if stage >= 2 else 1),
        optimizer=optimizer_bytes * n_params // (n if stage >= 1 else 1),
    )


# --- precision and the ZeRO calculator ----------------------------------------------------

PRECISIONS = ("fp32", "mixed", "bf16")  # fp32; bf16 working copy + fp32 master; pure bf16


def precision_dtype(precision: str) -> str:
    """Dtype of compute, working parameters and gradients: "fp32", else "bf16"."""
    require_choice("precision", precision, PRECISIONS)
    return _precision_dtype(precision)


def _precision_dtype(precision: str) -> str:
    return "fp32" if precision == "fp32" else "bf16"


def precision_bytes_per_param(precision: str = "mixed", optimizer: str = "adam"
                              ) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter for a precision and optimizer.

    "fp32": 4 + 4 + 8 with Adam; "mixed": 2 + 2 + 12 (fp32 master and moments, ZeRO's K=12);
    "bf16": everything 16-bit, 2 + 2 + 4.
    """
    require_choice("precision", precision, PRECISIONS)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    b = _model_state_bytes(1, 0, _precision_dtype(precision), optimizer, precision == "mixed")
    return b.parameters, b.gradients, b.optimizer


def zero_sharded_fraction(stage: int, world_size: int) -> tuple[float, float, float]:
    """Fraction of (parameters, gradients, optimizer) one device keeps under ZeRO `stage`."""
    require_int("stage", stage)
    require_choice("stage", stage, ZERO_STAGES)
    require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    n = world_size
    return (1 / n if stage >= 3 else 1.0, 1 / n if stage >= 2 else 1.0,
            1 / n if stage >= 1 else 1.0)


def max_params_that_fit(memory_bytes: int, world_size: int, stage: int, *,
                        param_bytes: int = 2, grad_bytes: int = 2, optimizer_bytes: int = 12,
                        reserved_bytes: int = 0) -> int:
    """Largest n_params (at most MAX_COUNT) whose ZeRO model states fit
    `memory_bytes - reserved_bytes` per device."""
    require_int("memory_bytes", memory_bytes, 0, MAX_COUNT)
    _check_zero(world_size, stage, param_bytes, grad_bytes, optimizer_bytes)
    require_int("reserved_bytes", reserved_bytes, 0, MAX_COUNT)
    budget = memory_bytes - reserved_bytes
    n = world_size
    per_param = (Fraction(param_bytes, n if stage >= 3 else 1)
                 + Fraction(grad_bytes, n if stage >= 2 else 1)
                 + Fraction(optimizer_bytes, n if stage >= 1 else 1))  # exact, no rounding
    if budget < 0 or per_param <= 0:
        return 0

    def used(k: int) -> int:
        return _zero_states(k, n, stage, param_bytes, grad_bytes, optimizer_bytes).model_states

    # k * per_param - 3 < used(k) <= k * per_param (three floors): search between the two
    lo, hi = int(budget / per_param), int((budget + 3) / per_param) + 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if used(mid) <= budget else (lo, mid)
    return min(lo, MAX_COUNT)


def checkpointed_activation_bytes(workload: Workload, batch_size: int,
                                  dtype: str | None = None) -> int:
    """Activations kept with activation checkpointing at every layer, in bytes.

    Each layer keeps only its input (the previous layer's output) plus one layer's
    recomputed activations at a time, plus the loss's.
    """
    require_type("workload", workload, Workload)
    require_int("batch_size", batch_size, 0, MAX_COUNT)
    if dtype is not None:
        require_choice("dtype", dtype, DTYPE_BYTES)
    scale = DTYPE_BYTES[dtype or workload.dtype] / DTYPE_BYTES[workload.dtype]
    inputs = workload.input_bytes + sum(layer.output_bytes for layer in workload.layers[:-1])
    largest = max((layer.activation_bytes for layer in workload.layers), default=0)
    return int((inputs + largest + workload.loss_bytes) * batch_size * scale)
