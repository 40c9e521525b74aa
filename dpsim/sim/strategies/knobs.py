"""The planner's extra knobs: torch's precision policy, activation checkpointing, offload.

A strategy takes a knob when its config has the field (FSDPConfig has all three,
DDPConfig activation checkpointing); the planner sets it on the config `make_config`
built, so strategies need no new code. A knob a strategy's config does not have is refused
with a ValueError naming it and the strategies that take it.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from dpsim.sim.cost.memory import PRECISIONS
from dpsim.sim.strategies.fsdp.config import TORCH_AMP_PRECISIONS

# "torch_amp": FSDP2's fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
# reduce_dtype=torch.float32)): fp32 sharded states, bf16 all-gathers and compute, fp32
# reduce-scatter; "torch_amp_bf16_reduce": the same with FSDP2's default reduce_dtype=None,
# which reduce-scatters in bf16
KNOB_PRECISIONS = (*(p for p in PRECISIONS if p != "bf16"), *TORCH_AMP_PRECISIONS)
# "default": the strategy's own default (`Strategy.default_precision`): "torch_amp" for
# FSDP (ZeRO-3), which never keeps ZeRO's 2 + 2 + 12 bytes; "mixed" for the others
DEFAULT_PRECISION = "default"
PLANNER_PRECISIONS = (DEFAULT_PRECISION, *KNOB_PRECISIONS)
# the real setting each planner precision stands for (a torch call, or the scheme's source)
PRECISION_SETTINGS = {
    DEFAULT_PRECISION: "the strategy's own: 'torch_amp' for FSDP (ZeRO-3), 'mixed' for the "
                       "others",
    "fp32": "no autocast; fully_shard(model) with its default MixedPrecisionPolicy(), "
            "which casts nothing: 4 + 4 + 8 B/param with Adam, gradients sent in fp32",
    "mixed": "ZeRO's mixed precision (Rajbhandari et al. 2020, Sec. 3.1; DeepSpeed, no "
             "torch setting): bf16 parameters and gradients, fp32 master and moments "
             "(2 + 2 + 12 B/param), gradients sent in bf16",
    "torch_amp": "fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
                 "reduce_dtype=torch.float32)): fp32 shards (4 + 4 + 8 B/param), bf16 "
                 "all-gathers and compute, fp32 reduce-scatter; reduce_dtype=None (the "
                 "default) reduces in bf16",
    "torch_amp_bf16_reduce": "fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype="
                             "torch.bfloat16)): reduce_dtype=None, so FSDP2 reduce-scatters "
                             "in param_dtype, bf16; fp32 shards (4 + 4 + 8 B/param)",
}


def resolve_precision(strategy: str, precision: str) -> str:
    """`precision` (one of PLANNER_PRECISIONS), or the strategy's default when it is
    "default"."""
    from dpsim.sim.strategies.registry import get_strategy

    if precision == DEFAULT_PRECISION:
        return get_strategy(strategy).default_precision
    return precision


def base_precision(precision: str) -> str:
    """The precision `make_config` is given: torch_amp computes like "mixed" (bf16)."""
    return "mixed" if precision in TORCH_AMP_PRECISIONS else precision


def apply_knobs(config: Any, strategy: str, precision: str = "mixed",
                activation_checkpointing: bool = False, offload: bool = False) -> Any:
    """`config` with the knobs set; ValueError naming a knob its strategy does not take."""
    from dpsim.sim.strategies.registry import get_strategy, names

    kind = get_strategy(strategy).config_type
    changes: dict[str, Any] = {}
    if precision in TORCH_AMP_PRECISIONS:
        changes["precision"] = precision
    if activation_checkpointing:
        changes["activation_checkpointing"] = True
    if offload:
        changes["offload"] = True
    for name, value in changes.items():
        if name not in _fields(kind):
            takers = [n for n in names() if name in _fields(get_strategy(n).config_type)]
            raise ValueError(f"{name}={value!r} is not simulated for strategy={strategy!r} "
                             f"({kind.__name__} has no {name}); allowed: the strategies "
                             f"{', '.join(takers)} take it")
    return replace(config, **changes)


def _fields(config_type: type) -> set[str]:
    return {f.name for f in fields(config_type)}
