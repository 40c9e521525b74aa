"""FSDP / ZeRO's config: one training step; world_size comes from the Cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import Int, OneOf, check_fields
from dpsim.sim.collectives.group_cost import GROUP_ALGORITHMS
from dpsim.sim.cost.memory import OPTIMIZERS, PRECISIONS, precision_dtype
from dpsim.sim.limits import Samples
from dpsim.sim.strategies.fsdp.closed_form import Stage

# torch's mixed precision, FSDP2's MixedPrecisionPolicy(param_dtype=torch.bfloat16, ...): fp32
# sharded parameters, gradients and moments; bf16 all-gathers and compute. "torch_amp":
# reduce_dtype=torch.float32 (fp32 reduce-scatter); "torch_amp_bf16_reduce": reduce_dtype=None,
# FSDP2's default, which reduces in param_dtype (bf16 reduce-scatter)
TORCH_AMP_PRECISIONS = ("torch_amp", "torch_amp_bf16_reduce")
FSDP_PRECISIONS = (*PRECISIONS, *TORCH_AMP_PRECISIONS)
UnitLayers = Annotated[int, Int(1, 1 << 20)]  # consecutive workload layers in one FSDP unit


@dataclass(frozen=True)
class FSDPConfig:
    """One FSDP / ZeRO training step; world_size comes from the Cluster."""

    batch_size: Samples = 8  # samples per device per step
    stage: Stage = 3  # ZeRO stage: 0 replicate, 1 +optimizer sharded, 2 +gradients, 3 +parameters
    # "fp32", "mixed" (bf16 compute, fp32 master), "bf16", one of TORCH_AMP_PRECISIONS
    precision: Annotated[str, OneOf(FSDP_PRECISIONS)] = "mixed"
    optimizer: Annotated[str, OneOf(OPTIMIZERS)] = "adam"  # one of memory.OPTIMIZERS
    reshard_after_forward: bool = True  # stage 3: free gathered parameters after forward
    forward_prefetch: bool = True  # all-gather unit i+1 while unit i computes forward
    backward_prefetch: bool = True  # all-gather unit i-1 while unit i computes backward
    activation_checkpointing: bool = False  # keep unit inputs only; recompute in backward
    layers_per_unit: UnitLayers = 1  # consecutive workload layers wrapped as one FSDP unit
    # "auto" (NCCL's choice; ring on generic links) or forced, one of
    # collectives.group_cost.GROUP_ALGORITHMS
    algorithm: Annotated[str, OneOf(GROUP_ALGORITHMS)] = "auto"
    offload: bool = False  # CPUOffloadPolicy: sharded states in host memory (copies not timed)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def dtype(self) -> str:
        """Dtype of compute, of the gathered parameters and of the gradients computed."""
        if self.precision in TORCH_AMP_PRECISIONS:
            return "bf16"
        return precision_dtype(self.precision)
