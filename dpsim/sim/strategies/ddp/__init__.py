"""DistributedDataParallel simulated: gradient buckets all-reduced while backward runs.

`buckets` (which gradients are all-reduced together), `config` (DDPConfig), `step`
(`simulate`, its typed state, `step_result`), `scaling` (a study over world sizes),
`strategy` (DDPStrategy for the planner). The names below are the package's public API.
"""

from dpsim.sim.strategies.ddp.buckets import (
    DEFAULT_BUCKET_CAP_MB,
    DEFAULT_FIRST_BUCKET_CAP_MB,
    FIRST_ITERATION_CAP_BYTES,
    Bucket,
    GradTensor,
    MiB,
    build_buckets,
    first_bucket_cap_for,
    first_iteration_buckets,
    grad_tensors,
)
from dpsim.sim.strategies.ddp.config import DDPConfig
from dpsim.sim.strategies.ddp.scaling import ScalingPoint, scaling
from dpsim.sim.strategies.ddp.step import (
    DDPState,
    all_reduce_time_s,
    buckets_of,
    copy_time_s,
    simulate,
    step_result,
)
from dpsim.sim.strategies.ddp.strategy import STRATEGY, DDPStrategy

__all__ = [
    "DEFAULT_BUCKET_CAP_MB",
    "DEFAULT_FIRST_BUCKET_CAP_MB",
    "FIRST_ITERATION_CAP_BYTES",
    "STRATEGY",
    "Bucket",
    "DDPConfig",
    "DDPState",
    "DDPStrategy",
    "GradTensor",
    "MiB",
    "ScalingPoint",
    "all_reduce_time_s",
    "buckets_of",
    "build_buckets",
    "copy_time_s",
    "first_bucket_cap_for",
    "first_iteration_buckets",
    "grad_tensors",
    "scaling",
    "simulate",
    "step_result",
]
