"""DDP's scaling study: the same per-process batch simulated at several world sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpsim.sim.hardware import Cluster
from dpsim.sim.limits import MAX_WORLD_SIZE
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.ddp.config import DDPConfig
from dpsim.sim.strategies.ddp.step import buckets_of, simulate, step_result
from dpsim.sim.strategies.inputs import require_cluster, require_ints
from dpsim.sim.workload import Workload


@dataclass(frozen=True)
class ScalingPoint:
    """One world size in a scaling study."""

    world_size: int
    breakdown: StepResult
    n_buckets: int
    samples_per_s: float  # global throughput


def scaling(workload: Workload, cluster: Cluster, config: DDPConfig | None = None,
            world_sizes: Sequence[int] = (1, 2, 4, 8)) -> list[ScalingPoint]:
    """Simulate the same per-process batch on `cluster` resized to each world size."""
    require_cluster(cluster)
    require_ints("world_sizes", world_sizes, 1, MAX_WORLD_SIZE)
    cfg = DDPConfig() if config is None else config  # simulate checks it and the workload
    out = []
    for n in world_sizes:
        trace = simulate(workload, cluster.with_devices(n), cfg)
        b = step_result(trace)
        out.append(ScalingPoint(n, b, len(buckets_of(trace)),
                                n * cfg.batch_size / b.step_s if b.step_s > 0 else 0.0))
    return out
