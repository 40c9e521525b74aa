"""FSDP / ZeRO as the planner sees it: one strategy per ZeRO stage (1, 2, 3)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

from dpsim.sim.checks import Int, check_fields
from dpsim.sim.hardware import Cluster
from dpsim.sim.strategies.base import CrossoverTerms, Placement, StepResult, Strategy
from dpsim.sim.strategies.fsdp.config import FSDPConfig
from dpsim.sim.strategies.fsdp.step import simulate, step_result
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload


@dataclass(frozen=True)
class FSDPStrategy(Strategy[FSDPConfig]):
    """One ZeRO stage of FSDP for the planner: one unit per layer, prefetch on."""

    stage: Annotated[int, Int(1, 3)]  # 1, 2 or 3
    name: str  # registry key
    label: str  # name shown to people
    placement: Placement  # what is replicated, what is sharded
    config_type = FSDPConfig

    @property
    def default_precision(self) -> str:  # type: ignore[override]
        """ZeRO-3 is torch's FSDP2 with MixedPrecisionPolicy(param_dtype=torch.bfloat16,
        reduce_dtype=torch.float32): fp32 states ("torch_amp"); stages 1 and 2 keep ZeRO's
        own scheme ("mixed": 16-bit copy, fp32 master)."""
        return "torch_amp" if self.stage == 3 else "mixed"

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("name", "label"):
            if not getattr(self, name):
                raise ValueError(f"{name}='' is not allowed; allowed: a non-empty string")

    def make_config(self, batch_per_device: int, global_batch: int, n_devices: int,
                    optimizer: str, precision: str) -> FSDPConfig:
        """The default config at this strategy's stage."""
        config = super().make_config(batch_per_device, global_batch, n_devices, optimizer,
                                     precision)
        return replace(config, stage=self.stage)

    def simulate(self, workload: Workload, cluster: Cluster, config: FSDPConfig) -> Trace:
        """See `fsdp.simulate`."""
        return simulate(workload, cluster, config)

    def step_result(self, trace: Trace) -> StepResult:
        """See `fsdp.step_result`."""
        return step_result(trace)

    def crossover_terms(self, workload: Workload, dtype: str) -> CrossoverTerms | None:
        """ZeRO-3: two all-gathers and a reduce-scatter (3 model sizes), 3 latencies per
        unit (one per layer), hidden behind forward and backward; None for stages 1-2."""
        if self.stage != 3:
            return None
        return CrossoverTerms(3.0, 3 * len(workload.layers), True, "all_gather")


ZERO1 = FSDPStrategy(1, "zero1", "ZeRO-1 (optimizer state sharded)", Placement(
    "parameters, gradients", "optimizer state, the batch", "optimizer state is what does not fit"))
ZERO2 = FSDPStrategy(2, "zero2", "ZeRO-2 (gradients sharded too)", Placement(
    "parameters", "gradients, optimizer state, the batch",
    "gradients + optimizer state do not fit"))
ZERO3 = FSDPStrategy(3, "fsdp", "FSDP / ZeRO-3", Placement(
    "nothing", "parameters, gradients, optimizer state, the batch",
    "the model's states do not fit one device"))
