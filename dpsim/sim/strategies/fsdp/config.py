"""FSDP / ZeRO's config: one training step; world_size comes from the Cluster."""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.sim.checks import require_bool, require_choice, require_int
from dpsim.sim.collectives.group_cost import GROUP_ALGORITHMS
from dpsim.sim.cost.memory import OPTIMIZERS, PRECISIONS, precision_dtype

# torch's mixed precision (FSDP2 MixedPrecisionPolicy(bf16, reduce fp32)): fp32 sharded
# parameters, gradients and moments; bf16 all-gathers and compute; fp32 reduce-scatter
FSDP_PRECISIONS = (*PRECISIONS, "torch_amp")


@dataclass(frozen=True)
class FSDPConfig:
    """One FSDP / ZeRO training step; world_size comes from the Cluster."""

    batch_size: int = 8  # samples per device per step
    stage: int = 3  # ZeRO stage: 0 replicate, 1 +optimizer sharded, 2 +gradients, 3 +parameters
    precision: str = "mixed"  # "fp32", "mixed" (bf16 compute, fp32 master), "bf16", "torch_amp"
    optimizer: str = "adam"  # one of memory.OPTIMIZERS
    reshard_after_forward: bool = True  # stage 3: free gathered parameters after forward
    forward_prefetch: bool = True  # all-gather unit i+1 while unit i computes forward
    backward_prefetch: bool = True  # all-gather unit i-1 while unit i computes backward
    activation_checkpointing: bool = False  # keep unit inputs only; recompute in backward
    layers_per_unit: int = 1  # consecutive workload layers wrapped as one FSDP unit
    algorithm: str = "auto"  # "auto" (NCCL's choice; ring on generic links) or forced, one
    # of collectives.group_cost.GROUP_ALGORITHMS
    offload: bool = False  # CPUOffloadPolicy: sharded states in host memory (copies not timed)

    def __post_init__(self) -> None:
        require_int("batch_size", self.batch_size, 1, 1 << 24)
        require_int("stage", self.stage, 0, 3)  # one of ZERO_STAGES; refuses True (== 1)
        require_choice("precision", self.precision, FSDP_PRECISIONS)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_int("layers_per_unit", self.layers_per_unit, 1, 1 << 20)
        require_choice("algorithm", self.algorithm, GROUP_ALGORITHMS)
        for name in ("reshard_after_forward", "forward_prefetch", "backward_prefetch",
                     "activation_checkpointing", "offload"):
            require_bool(name, getattr(self, name))

    @property
    def dtype(self) -> str:
        """Dtype of compute, of the gathered parameters and of the gradients computed."""
        return "bf16" if self.precision == "torch_amp" else precision_dtype(self.precision)
