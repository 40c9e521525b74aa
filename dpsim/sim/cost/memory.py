"""Bytes per device: model states (parameters, gradients, optimizer) and activations.

Conventions: fp32 training keeps 4 B/param of parameters and of gradients; Adam keeps
two fp32 moments (8 B/param) and one fp32 `step` scalar per parameter tensor. Mixed
precision keeps 16-bit parameters and gradients and an fp32 master copy with the moments:
2 + 2 + 12 = 16 B/param (the ZeRO paper's K = 12, its fp16 scheme). Torch's (autocast,
FSDP2 MixedPrecisionPolicy: fp32 states, 4 + 4 + 8) and Megatron-LM's (fp32 gradients,
2 + 4 + 12 = 18) are in `precision`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Annotated

from dpsim.sim.checks import Int, OneOf, check_fields
from dpsim.sim.limits import (
    MAX_COUNT,
    MAX_STATE_BYTES_PER_PARAM,
    MAX_TOTAL_BYTES,
    Count,
    TotalBytes,
    WorldSize,
)
from dpsim.sim.workload import DTYPE_BYTES, Workload

OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations")
STEP_BYTES = 4  # torch.optim.Adam keeps `step` as a float32 tensor per parameter tensor
ZERO_STAGES = (0, 1, 2, 3)
PRECISIONS = ("fp32", "mixed", "bf16")  # fp32; bf16 working copy + fp32 master; pure bf16

# the hints of the cost models' arguments
Dtype = Annotated[str, OneOf(tuple(DTYPE_BYTES))]  # an element type: "fp32", "bf16", ...
Optimizer = Annotated[str, OneOf(OPTIMIZERS)]
Precision = Annotated[str, OneOf(PRECISIONS)]
ZeroStage = Annotated[int, Int(0, 3)]  # 0 (DDP) .. 3 (parameters sharded too)
StateBytes = Annotated[int, Int(0, MAX_STATE_BYTES_PER_PARAM)]  # bytes per parameter


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per category on one device."""

    parameters: TotalBytes = 0
    gradients: TotalBytes = 0
    optimizer: TotalBytes = 0
    activations: TotalBytes = 0

    def __post_init__(self) -> None:
        if all(type(v) is int and 0 <= v <= MAX_TOTAL_BYTES for v in
               (self.parameters, self.gradients, self.optimizer, self.activations)):
            return  # the common case: whole byte counts the cost models derived
        check_fields(self)

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
    moments = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}[optimizer]
    steps = n_param_tensors * STEP_BYTES if optimizer in ("adam", "adamw") else 0
    width = 4 if mixed_precision else DTYPE_BYTES[state_dtype]
    master = 4 * n_params if mixed_precision else 0
    return moments * width * n_params + steps + master


def model_state_bytes(
    n_params: Count,
    n_param_tensors: Count = 0,
    *,
    dtype: Dtype = "fp32",
    optimizer: Optimizer = "adam",
    mixed_precision: bool = False,
) -> MemoryBreakdown:
    """Parameters, gradients and optimizer bytes for a model of `n_params` elements.

    With mixed_precision the working copy is `dtype` (bf16 or fp16) and the optimizer keeps
    an fp32 master copy; without it, everything is stored in `dtype`.
    """
    if mixed_precision and dtype == "fp32":
        raise ValueError("dtype='fp32' with mixed_precision=True; allowed: dtype 'bf16' or 'fp16'")
    width = DTYPE_BYTES[dtype]
    return MemoryBreakdown(
        parameters=width * n_params,
        gradients=width * n_params,
        optimizer=optimizer_state_bytes(n_params, n_param_tensors, optimizer,
                                        mixed_precision, dtype),
    )


def bytes_per_param(optimizer: str = "adam", mixed_precision: bool = False) -> int:
    """Model-state bytes per parameter (ignoring per-tensor `step` scalars): 16 for mixed Adam."""
    dtype = "bf16" if mixed_precision else "fp32"
    return model_state_bytes(1, 0, dtype=dtype, optimizer=optimizer,
                             mixed_precision=mixed_precision).model_states


def predict_single(
    workload: Workload,
    batch_size: Count,
    *,
    optimizer: Optimizer = "adam",
    dtype: Dtype = "fp32",
    mixed_precision: bool = False,
) -> MemoryBreakdown:
    """Peak-of-step memory on one device: model states plus the activations of a batch."""
    states = model_state_bytes(workload.n_params, workload.n_param_tensors, dtype=dtype,
                               optimizer=optimizer, mixed_precision=mixed_precision)
    return MemoryBreakdown(states.parameters, states.gradients, states.optimizer,
                           workload.activation_bytes(batch_size, dtype))


def max_batch_size(
    workload: Workload,
    memory_bytes: Count,
    *,
    optimizer: Optimizer = "adam",
    dtype: Dtype = "fp32",
    mixed_precision: bool = False,
    limit: Count = 1 << 20,
) -> int:
    """Largest batch (<= `limit`) whose predicted memory fits `memory_bytes` (0 if states don't)."""
    per_sample = workload.activation_bytes(1, dtype)
    states = model_state_bytes(workload.n_params, workload.n_param_tensors, dtype=dtype,
                               optimizer=optimizer, mixed_precision=mixed_precision).model_states
    if states > memory_bytes:
        return 0
    if per_sample == 0:
        return limit
    return min(limit, (memory_bytes - states) // per_sample)


def zero_bytes_per_device(
    n_params: Count,
    world_size: WorldSize,
    stage: ZeroStage,
    *,
    param_bytes: StateBytes = 2,
    grad_bytes: StateBytes = 2,
    optimizer_bytes: StateBytes = 12,
) -> MemoryBreakdown:
    """Model states per device under ZeRO `stage` (0 = DDP), in bytes.

    Stage 1 shards the optimizer state, stage 2 also the gradients, stage 3 also the
    parameters (FSDP's FULL_SHARD). Defaults are mixed-precision Adam (2 + 2 + 12);
    each of the three is 0..MAX_STATE_BYTES_PER_PARAM bytes per parameter.
    """
    n = world_size
    return MemoryBreakdown(
        parameters=param_bytes * n_params // (n if stage >= 3 else 1),
        gradients=grad_bytes * n_params // (n if stage >= 2 else 1),
        optimizer=optimizer_bytes * n_params // (n if stage >= 1 else 1),
    )


# --- precision and the ZeRO calculator ----------------------------------------------------

def precision_dtype(precision: str) -> str:
    """Dtype of compute, working parameters and gradients: "fp32", else "bf16"."""
    return "fp32" if precision == "fp32" else "bf16"


def precision_bytes_per_param(precision: Precision = "mixed", optimizer: Optimizer = "adam"
                              ) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter for a precision and optimizer.

    "fp32": 4 + 4 + 8 with Adam; "mixed": 2 + 2 + 12 (fp32 master and moments, ZeRO's K=12);
    "bf16": everything 16-bit, 2 + 2 + 4.
    """
    b = model_state_bytes(1, 0, dtype=precision_dtype(precision), optimizer=optimizer,
                          mixed_precision=precision == "mixed")
    return b.parameters, b.gradients, b.optimizer


def max_params_that_fit(memory_bytes: Count, world_size: WorldSize, stage: ZeroStage, *,
                        param_bytes: StateBytes = 2, grad_bytes: StateBytes = 2,
                        optimizer_bytes: StateBytes = 12, reserved_bytes: Count = 0) -> int:
    """Largest n_params (at most MAX_COUNT) whose ZeRO model states fit
    `memory_bytes - reserved_bytes` per device."""
    budget = memory_bytes - reserved_bytes
    n = world_size
    per_param = (Fraction(param_bytes, n if stage >= 3 else 1)
                 + Fraction(grad_bytes, n if stage >= 2 else 1)
                 + Fraction(optimizer_bytes, n if stage >= 1 else 1))  # exact, no rounding
    if budget < 0 or per_param <= 0:
        return 0

    def used(k: int) -> int:
        return zero_bytes_per_device(k, n, stage, param_bytes=param_bytes, grad_bytes=grad_bytes,
                                     optimizer_bytes=optimizer_bytes).model_states

    # k * per_param - 3 < used(k) <= k * per_param (three floors): search between the two
    lo, hi = int(budget / per_param), int((budget + 3) / per_param) + 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if used(mid) <= budget else (lo, mid)
    return min(lo, MAX_COUNT)


def checkpointed_activation_bytes(workload: Workload, batch_size: Count,
                                  dtype: Dtype | None = None) -> int:
    """Activations kept with activation checkpointing at every layer, in bytes.

    Each layer keeps only its input (the previous layer's output) plus one layer's
    recomputed activations at a time, plus the loss's.
    """
    scale = DTYPE_BYTES[dtype or workload.dtype] / DTYPE_BYTES[workload.dtype]
    inputs = workload.input_bytes + sum(layer.output_bytes for layer in workload.layers[:-1])
    largest = max((layer.activation_bytes for layer in workload.layers), default=0)
    return int((inputs + largest + workload.loss_bytes) * batch_size * scale)
