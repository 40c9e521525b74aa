"""Precision policies: which dtype each model state is stored in, computed in, sent in.

Three schemes train "in mixed precision" and keep different bytes (Adam):

* torch's (`torch.autocast`; FSDP2's `MixedPrecisionPolicy(param_dtype=bf16)`): parameters
  stay fp32 (FSDP2: the fp32 *sharded* parameter), matmuls run in a 16-bit copy made on the
  fly (autocast's cast cache; FSDP2's all-gathered unsharded parameter), gradients land in
  fp32 on the parameter, and the optimizer keeps fp32 moments: 4 + 4 + 8 = 16 B/param.
  Gradients are sent in fp32 by DDP (it reduces `p.grad`) and by FSDP2 with
  `reduce_dtype=torch.float32`; FSDP2's default `reduce_dtype=None` reduces in
  `param_dtype`, bf16 (torch/distributed/fsdp/_fully_shard/_fsdp_api.py);
* the ZeRO paper's (Rajbhandari et al. 2020, "ZeRO", Sec. 3.1, fp16 mixed precision):
  16-bit parameters and gradients, an fp32 master copy inside the optimizer with the
  moments: 2 + 2 + 12 = 16 B/param (K = 12);
* Megatron-LM's in bf16: 16-bit parameters, gradients accumulated and all-reduced in an fp32
  `main_grad` buffer, fp32 master copy and moments: 2 + 4 + 12 = 18 B/param (Megatron Core
  developer guide, "Distributed Optimizer": bf16 param, fp32 grads: 18, or 6 + 12/d when the
  optimizer state is sharded over d ranks).

The totals differ or the split does, so sharding one category (ZeRO-1: the optimizer state;
ZeRO-2: also the gradients) leaves different bytes per device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import OneOf, check_fields
from dpsim.sim.cost.fsdp_shards import fsdp_rank_bytes
from dpsim.sim.cost.memory import STEP_BYTES, ZERO_STAGES, Dtype, MemoryBreakdown, Optimizer
from dpsim.sim.limits import Count, WorldSize
from dpsim.sim.workload import DTYPE_BYTES

POLICIES = ("fp32", "torch_amp", "zero_mixed", "megatron_mixed", "pure_16bit")
# what each policy stands for: a torch setting, or the publication that defines it
POLICY_SOURCES = {
    "fp32": "torch: no autocast; fully_shard's default MixedPrecisionPolicy() casts nothing",
    "torch_amp": "torch: torch.autocast(dtype=torch.bfloat16) under DDP, or fully_shard("
                 "mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
                 "reduce_dtype=torch.float32)); with reduce_dtype=None (the default) "
                 "FSDP2 reduces in bf16",
    "zero_mixed": "published: ZeRO's fp16 mixed precision (Rajbhandari et al. 2020, "
                  "Sec. 3.1): 2 + 2 + 12 B/param",
    "megatron_mixed": "published: Megatron-LM bf16 with fp32 main_grad (Megatron Core "
                      "developer guide, Distributed Optimizer): 2 + 4 + 12 = 18 B/param",
    "pure_16bit": "torch: model.to(torch.bfloat16), optimizer moments in bf16",
}
LOW_DTYPES = ("bf16", "fp16")
Policy = Annotated[str, OneOf(POLICIES)]
LowDtype = Annotated[str, OneOf(LOW_DTYPES)]
_MOMENTS = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}


@dataclass(frozen=True)
class PrecisionPolicy:
    """Dtypes of a training step: stored, computed in, communicated (names from DTYPE_BYTES)."""

    name: Policy  # one of POLICIES
    param_dtype: Dtype  # the parameters the optimizer updates (FSDP2: the sharded parameter)
    compute_dtype: Dtype  # matmul inputs (autocast's dtype; MixedPrecisionPolicy.param_dtype)
    grad_dtype: Dtype  # p.grad after backward
    reduce_dtype: Dtype  # gradients are all-reduced / reduce-scattered in this dtype
    state_dtype: Dtype  # optimizer moments
    master_copy: bool  # the optimizer keeps an fp32 copy of 16-bit parameters (ZeRO, Megatron)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def gathered_dtype(self) -> str:
        """Dtype of FSDP's all-gathered (unsharded) parameters: the compute dtype."""
        return self.compute_dtype


def precision_policy(name: Policy = "torch_amp", low: LowDtype = "bf16",
                     reduce_dtype: Dtype | None = None) -> PrecisionPolicy:
    """A named policy with 16-bit dtype `low` (POLICY_SOURCES says what each stands for).
    `reduce_dtype` (torch_amp only) defaults to fp32: what DDP under autocast all-reduces and
    what FSDP2 reduces in with MixedPrecisionPolicy(reduce_dtype=torch.float32); pass `low`
    for FSDP2's default reduce_dtype=None, which reduces in param_dtype."""
    if reduce_dtype is not None and name != "torch_amp":
        raise ValueError(f"reduce_dtype={reduce_dtype!r} with name={name!r}; allowed: "
                         "reduce_dtype only with name='torch_amp' (None otherwise)")
    if name == "fp32":
        return PrecisionPolicy(name, "fp32", "fp32", "fp32", "fp32", "fp32", False)
    if name == "torch_amp":
        return PrecisionPolicy(name, "fp32", low, "fp32", reduce_dtype or "fp32", "fp32", False)
    if name == "zero_mixed":
        return PrecisionPolicy(name, low, low, low, low, "fp32", True)
    if name == "megatron_mixed":  # gradients accumulate and all-reduce in fp32 main_grad
        return PrecisionPolicy(name, low, low, "fp32", "fp32", "fp32", True)
    return PrecisionPolicy(name, low, low, low, low, low, False)


def policy_model_state_bytes(n_params: Count, n_param_tensors: Count, policy: PrecisionPolicy,
                             optimizer: Optimizer = "adam") -> MemoryBreakdown:
    """Parameters, gradients and optimizer bytes of `n_params` elements in
    `n_param_tensors` tensors (Adam keeps a 4-byte fp32 `step` per tensor)."""
    p, g, o = policy_bytes_per_param(policy, optimizer)
    steps = n_param_tensors * STEP_BYTES if optimizer in ("adam", "adamw") else 0
    return MemoryBreakdown(p * n_params, g * n_params, o * n_params + steps)


def policy_bytes_per_param(policy: PrecisionPolicy, optimizer: Optimizer = "adam"
                           ) -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter: torch_amp with Adam 4 + 4 + 8,
    zero_mixed 2 + 2 + 12, megatron_mixed 2 + 4 + 12, fp32 4 + 4 + 8, pure_16bit 2 + 2 + 4."""
    state = _MOMENTS[optimizer] * DTYPE_BYTES[policy.state_dtype]
    master = 4 if policy.master_copy else 0
    return DTYPE_BYTES[policy.param_dtype], DTYPE_BYTES[policy.grad_dtype], state + master


def fsdp_policy_rank_bytes(param_shapes: list[tuple[int, ...]], world_size: int, rank: int,
                           policy: PrecisionPolicy, optimizer: str = "adam",
                           padded: bool = False) -> MemoryBreakdown:
    """Model-state bytes `rank` holds after an FSDP2 step under `policy` (torch_amp or fp32:
    MixedPrecisionPolicy keeps fp32 sharded parameters, gradients and moments)."""
    if policy.master_copy or policy.param_dtype != policy.state_dtype:
        raise ValueError(f"policy={policy.name!r} is not what FSDP2 keeps; allowed: "
                         "'fp32', 'torch_amp' or 'pure_16bit'")
    return fsdp_rank_bytes(param_shapes, world_size, rank, dtype=policy.param_dtype,
                           optimizer=optimizer, padded=padded)


def _zero_stage_bytes(n_params: int, n: int, stage: int, per_param: tuple[int, int, int]
                      ) -> MemoryBreakdown:
    p, g, o = per_param
    return MemoryBreakdown(p * n_params // (n if stage >= 3 else 1),
                           g * n_params // (n if stage >= 2 else 1),
                           o * n_params // (n if stage >= 1 else 1))


# scheme_table's columns: prefix -> policy
SCHEMES = {"torch": "torch_amp", "zero": "zero_mixed", "megatron": "megatron_mixed"}


def scheme_table(n_params: Count, world_size: WorldSize, optimizer: Optimizer = "adam",
                 low: LowDtype = "bf16") -> list[dict[str, object]]:
    """Per ZeRO stage: model-state bytes per device of each of SCHEMES (torch's, ZeRO's,
    Megatron's), keys "<scheme>_params_B", "_grads_B", "_optimizer_B", "_total_B"."""
    rows: list[dict[str, object]] = []
    per_param = {k: policy_bytes_per_param(precision_policy(name, low), optimizer)
                 for k, name in SCHEMES.items()}
    for stage in ZERO_STAGES:
        row: dict[str, object] = {"stage": stage}
        for k, b in per_param.items():
            m = _zero_stage_bytes(n_params, world_size, stage, b)
            row.update({f"{k}_params_B": m.parameters, f"{k}_grads_B": m.gradients,
                        f"{k}_optimizer_B": m.optimizer, f"{k}_total_B": m.model_states})
        rows.append(row)
    return rows


def offloaded(breakdown: MemoryBreakdown, offload: bool) -> tuple[MemoryBreakdown, int]:
    """(device bytes, host bytes) of a rank's model states under FSDP2's CPUOffloadPolicy:
    sharded parameters, gradients and optimizer state live in host memory (the optimizer
    steps on the CPU); activations and all-gathered parameters stay on the device."""
    if not offload:
        return breakdown, 0
    return MemoryBreakdown(activations=breakdown.activations), breakdown.model_states
