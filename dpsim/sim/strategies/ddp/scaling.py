"""DDP's scaling study: the same per-process batch simulated at several world sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, cast

from dpsim.sim.checks import Each, Int
from dpsim.sim.hardware import Cluster
from dpsim.sim.limits import MAX_NODES, MAX_WORLD_SIZE
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.ddp.config import DDPConfig
from dpsim.sim.strategies.ddp.step import DDPState, simulate, step_result
from dpsim.sim.strategies.inputs import require_workload
from dpsim.sim.workload import Workload


@dataclass(frozen=True)
class ScalingPoint:
    """One world size in a scaling study."""

    world_size: int
    breakdown: StepResult
    n_buckets: int
    samples_per_s: float  # global throughput


def scaling(workload: Workload, cluster: Cluster, config: DDPConfig | None = None,
            world_sizes: Annotated[Sequence[int], Each(Int(1, MAX_WORLD_SIZE))] = (1, 2, 4, 8)
            ) -> list[ScalingPoint]:
    """Simulate the same per-process batch on `cluster` resized to each world size."""
    require_workload(workload)  # a layer that computes, so that a step takes time
    d = cluster.devices_per_node
    for i, n in enumerate(world_sizes):
        if n > d * MAX_NODES or (n > d and n % d):
            raise ValueError(f"world_sizes[{i}]={n} does not fill whole nodes of {d}; allowed: "
                             f"1..{d} or a multiple of {d} up to {d * MAX_NODES}")
    cfg = DDPConfig() if config is None else config
    out = []
    for n in world_sizes:
        trace = simulate(workload, cluster.with_devices(n), cfg)
        b = step_result(trace)
        out.append(ScalingPoint(n, b, len(cast(DDPState, trace.state).buckets),
                                n * cfg.batch_size / b.step_s if b.step_s > 0 else 0.0))
    return out
