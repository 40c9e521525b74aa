"""DataParallel as the planner sees it: one process drives every device of one node."""

from __future__ import annotations

import math
from dataclasses import replace

from dpsim.sim.hardware import Cluster
from dpsim.sim.strategies.base import Placement, StepResult, Strategy
from dpsim.sim.strategies.dp.config import DPConfig
from dpsim.sim.strategies.dp.result import step_result
from dpsim.sim.strategies.dp.step import check_node, simulate
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload


class DPStrategy(Strategy[DPConfig]):
    """DataParallel for the planner; no crossover terms: its copies do not overlap compute."""

    name = "dp"
    label = "DataParallel"
    placement = Placement("parameters, gradients, optimizer (re-copied every step)",
                          "the batch", "a quick try on 2-4 GPUs of one node; prefer DDP")
    config_type = DPConfig
    single_node = True  # one process drives every device

    def split_batch(self, n_devices: int, global_batch: int) -> int:
        """torch.chunk: any batch, but each used device needs a sample."""
        if global_batch < n_devices:
            raise ValueError(f"global_batch={global_batch} is out of range for DP on "
                             f"{n_devices} devices; allowed >= {n_devices}")
        return math.ceil(global_batch / n_devices)

    def make_config(self, batch_per_device: int, global_batch: int, n_devices: int,
                    optimizer: str, precision: str) -> DPConfig:
        """The global batch over n_devices, in the precision's compute dtype."""
        config = super().make_config(batch_per_device, global_batch, n_devices, optimizer,
                                     precision)
        return replace(config, n_devices=n_devices, batch_size=global_batch)

    def simulate(self, workload: Workload, cluster: Cluster, config: DPConfig) -> Trace:
        """See `dp.simulate`; the config must fit one node of the cluster (`check_node`: a
        config and a cluster meet here, as at the face)."""
        check_node(cluster, config)
        return simulate(workload, cluster, config)

    def step_result(self, trace: Trace) -> StepResult:
        """See `dp.step_result`."""
        return step_result(trace)


STRATEGY = DPStrategy()
