"""DDP's config: one DistributedDataParallel training step on every rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import OneOf, check_fields
from dpsim.sim.collectives.group_cost import GROUP_ALGORITHMS
from dpsim.sim.cost.memory import OPTIMIZERS
from dpsim.sim.limits import Samples
from dpsim.sim.strategies.ddp.buckets import (
    DEFAULT_BUCKET_CAP_MB,
    DEFAULT_FIRST_BUCKET_CAP_MB,
    CapMB,
    Dtype,
)


@dataclass(frozen=True)
class DDPConfig:
    """One DDP training step on every rank."""

    batch_size: Samples = 32  # samples per process per step (global batch = batch_size * N)
    bucket_cap_mb: CapMB = DEFAULT_BUCKET_CAP_MB  # MiB per bucket after the first
    first_bucket_cap_mb: CapMB = DEFAULT_FIRST_BUCKET_CAP_MB  # MiB for the first bucket
    overlap: bool = True  # False: all-reduce every bucket only after backward ends
    optimizer: Annotated[str, OneOf(OPTIMIZERS)] = "adam"  # one of memory.OPTIMIZERS
    dtype: Dtype = "fp32"  # compute and gradient dtype
    algorithm: Annotated[str, OneOf(GROUP_ALGORITHMS)] = "auto"  # all-reduce algorithm: "auto"
    # (NCCL's choice on GPU links, the ring on generic ones) or forced, one of
    # collectives.group_cost.GROUP_ALGORITHMS
    gradient_as_bucket_view: bool = False  # True: gradients live in the buckets (no copy)
    mixed_precision: bool = False  # memory: 16-bit working copy + fp32 master and moments
    first_iteration: bool = False  # True: the first step (one bucket of every gradient)
    activation_checkpointing: bool = False  # keep layer inputs; recompute forward in backward

    def __post_init__(self) -> None:
        check_fields(self)
        if self.mixed_precision and self.dtype == "fp32":
            raise ValueError("dtype='fp32' with mixed_precision=True; allowed: 'bf16' or 'fp16'")
