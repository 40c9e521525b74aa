"""DDP as the planner sees it: the default strategy when the model's states fit a device."""

from __future__ import annotations

from dpsim.sim.hardware import Cluster
from dpsim.sim.strategies.base import CrossoverTerms, Placement, StepResult, Strategy
from dpsim.sim.strategies.ddp.buckets import build_buckets, grad_tensors
from dpsim.sim.strategies.ddp.config import DDPConfig
from dpsim.sim.strategies.ddp.step import simulate, step_result
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload


class DDPStrategy(Strategy[DDPConfig]):
    """DDP for the planner: default buckets; bf16 gradients with fp32 master under "mixed"
    (the default `make_config`)."""

    name = "ddp"
    label = "DDP"
    placement = Placement("parameters, gradients, optimizer", "the batch",
                          "the model's states fit one device: the default")
    config_type = DDPConfig

    def simulate(self, workload: Workload, cluster: Cluster, config: DDPConfig) -> Trace:
        """See `ddp.simulate`."""
        return simulate(workload, cluster, config)

    def step_result(self, trace: Trace) -> StepResult:
        """See `ddp.step_result`."""
        return step_result(trace)

    def crossover_terms(self, workload: Workload, dtype: str) -> CrossoverTerms | None:
        """One all-reduce (2 model sizes), 2 latencies per bucket; backward covers it."""
        n_buckets = len(build_buckets(grad_tensors(workload, dtype)))
        return CrossoverTerms(2.0, 2 * n_buckets, False)


STRATEGY = DDPStrategy()
