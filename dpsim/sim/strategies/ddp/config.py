"""DDP's config: one DistributedDataParallel training step on every rank."""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.sim.checks import require_bool, require_choice, require_int
from dpsim.sim.collectives.group_cost import GROUP_ALGORITHMS
from dpsim.sim.cost.memory import OPTIMIZERS
from dpsim.sim.strategies.ddp.buckets import (
    DEFAULT_BUCKET_CAP_MB,
    DEFAULT_FIRST_BUCKET_CAP_MB,
    check_caps,
)
from dpsim.sim.workload import DTYPE_BYTES


@dataclass(frozen=True)
class DDPConfig:
    """One DDP training step on every rank."""

    batch_size: int = 32  # samples per process per step (global batch = batch_size * N)
    bucket_cap_mb: float = DEFAULT_BUCKET_CAP_MB  # MiB per bucket after the first
    first_bucket_cap_mb: float = DEFAULT_FIRST_BUCKET_CAP_MB  # MiB for the first bucket
    overlap: bool = True  # False: all-reduce every bucket only after backward ends
    optimizer: str = "adam"  # one of memory.OPTIMIZERS
    dtype: str = "fp32"  # compute and gradient dtype
    algorithm: str = "auto"  # all-reduce algorithm: "auto" (NCCL's choice on GPU links, the
    # ring on generic ones) or forced, one of collectives.group_cost.GROUP_ALGORITHMS
    gradient_as_bucket_view: bool = False  # True: gradients live in the buckets (no copy)
    mixed_precision: bool = False  # memory: 16-bit working copy + fp32 master and moments
    first_iteration: bool = False  # True: the first step (one bucket of every gradient)
    activation_checkpointing: bool = False  # keep layer inputs; recompute forward in backward

    def __post_init__(self) -> None:
        require_int("batch_size", self.batch_size, 1, 1 << 24)
        check_caps(self.bucket_cap_mb, self.first_bucket_cap_mb)
        require_bool("overlap", self.overlap)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_choice("dtype", self.dtype, DTYPE_BYTES)
        require_choice("algorithm", self.algorithm, GROUP_ALGORITHMS)
        require_bool("gradient_as_bucket_view", self.gradient_as_bucket_view)
        require_bool("mixed_precision", self.mixed_precision)
        require_bool("first_iteration", self.first_iteration)
        if self.mixed_precision and self.dtype == "fp32":
            raise ValueError("dtype='fp32' with mixed_precision=True; allowed: 'bf16' or 'fp16'")
        require_bool("activation_checkpointing", self.activation_checkpointing)
