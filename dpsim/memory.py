"""Bytes per device: model states (parameters, gradients, optimizer) and activations.

Conventions: fp32 training keeps 4 B/param of parameters and of gradients; Adam keeps
two fp32 moments (8 B/param) and one fp32 `step` scalar per parameter tensor. Mixed
precision keeps 16-bit parameters and gradients and an fp32 master copy with the moments:
2 + 2 + 12 = 16 B/param (the ZeRO paper's K = 12).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dpsim.validation import require_choice, require_int
from dpsim.workload import DTYPE_BYTES, Workload

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
    require_choice("optimizer", optimizer, OPTIMIZERS)
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
    require_int("n_params", n_params, 0)
    require_int("n_param_tensors", n_param_tensors, 0)
    require_choice("dtype", dtype, DTYPE_BYTES)
    if mixed_precision and dtype == "fp32":
        raise ValueError("dtype='fp32' with mixed_precision=True; allowed: dtype 'bf16' or 'fp16'")
    width = DTYPE_BYTES[dtype]
    return MemoryBreakdown(
        parameters=width * n_params,
        gradients=width * n_params,
        optimizer=optimizer_state_bytes(n_params, n_param_tensors, optimizer, mixed_precision,
                                        dtype),
    )


def bytes_per_param(optimizer: str = "adam", mixed_precision: bool = False) -> int:
    """Model-state bytes per parameter (ignoring per-tensor `step` scalars): 16 for mixed Adam."""
    dtype = "bf16" if mixed_precision else "fp32"
    b = model_state_bytes(1, 0, dtype=dtype, optimizer=optimizer, mixed_precision=mixed_precision)
    return b.model_states


def predict_single(
    workload: Workload,
    batch_size: int,
    *,
    optimizer: str = "adam",
    dtype: str = "fp32",
    mixed_precision: bool = False,
) -> MemoryBreakdown:
    """Peak-of-step memory on one device: model states plus the activations of a batch."""
    states = model_state_bytes(workload.n_params, workload.n_param_tensors, dtype=dtype,
                               optimizer=optimizer, mixed_precision=mixed_precision)
    act = workload.activation_bytes(batch_size, dtype)
    return MemoryBreakdown(states.parameters, states.gradients, states.optimizer, act)


def max_batch_size(
    workload: Workload,
    memory_bytes: int,
    *,
    optimizer: str = "adam",
    dtype: str = "fp32",
    mixed_precision: bool = False,
    limit: int = 1 << 20,
) -> int:
    """Largest batch whose predicted memory fits `memory_bytes` (0 if even the states don't)."""
    require_int("memory_bytes", memory_bytes, 0)
    states = predict_single(workload, 0, optimizer=optimizer, dtype=dtype,
                            mixed_precision=mixed_precision).model_states
    per_sample = workload.activation_bytes(1, dtype)
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
    parameters (FSDP's FULL_SHARD). Defaults are mixed-precision Adam (2 + 2 + 12).
    """
    require_int("n_params", n_params, 0)
    require_int("world_size", world_size, 1)
    require_choice("stage", stage, ZERO_STAGES)
    n = world_size
    return MemoryBreakdown(
        parameters=param_bytes * n_params // (n if stage >= 3 else 1),
        gradients=grad_bytes * n_params // (n if stage >= 2 else 1),
        optimizer=optimizer_bytes * n_params // (n if stage >= 1 else 1),
    )
