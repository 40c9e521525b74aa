"""One `simulate` and `step_result` for every strategy: the config's type (or the trace's
state) says which strategy's own function runs.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsim.sim.hardware import Cluster, Device
from dpsim.sim.strategies import ddp, dp, fsdp, single
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.ddp import DDPConfig, GradTensor
from dpsim.sim.strategies.dp import DPConfig, DPState
from dpsim.sim.strategies.fsdp import FSDPConfig, FSDPState, hsdp
from dpsim.sim.strategies.fsdp.hsdp import HSDPConfig, HSDPState
from dpsim.sim.strategies.single import SingleConfig, SingleState
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload

StrategyConfig = SingleConfig | DPConfig | DDPConfig | FSDPConfig | HSDPConfig
CONFIGS = (SingleConfig, DPConfig, DDPConfig, FSDPConfig, HSDPConfig)


def simulate(workload: Workload, hardware: Cluster | Device, config: StrategyConfig, *,
             tensors: Sequence[GradTensor] | None = None,
             ready_order: Sequence[str] | None = None) -> Trace:
    """One simulated training step of `workload` on `hardware`, trained as `config` says.

    The config's type picks the strategy: SingleConfig (`hardware` is a Device), DPConfig,
    DDPConfig, FSDPConfig (ZeRO stage `config.stage`) or HSDPConfig (`hardware` is a
    Cluster). `tensors` and `ready_order` are DDP's: the gradients as a real model has them,
    and the order backward makes them ready (names).
    """
    if (tensors is not None or ready_order is not None) and not isinstance(config, DDPConfig):
        raise ValueError(f"tensors and ready_order are given with config={config!r}; allowed: "
                         "only with a DDPConfig")
    if isinstance(config, SingleConfig):
        if not isinstance(hardware, Device):
            raise ValueError(f"hardware={hardware!r} is not a Device; allowed: a Device for "
                             "SingleConfig, e.g. get_device('h100-80gb')")
        return single.simulate(workload, hardware, config)
    if not isinstance(hardware, Cluster):
        raise ValueError(f"hardware={hardware!r} is not a Cluster; allowed: a Cluster for "
                         f"{type(config).__name__}, e.g. get_cluster('h100-node')")
    if isinstance(config, DDPConfig):
        return ddp.simulate(workload, hardware, config, tensors=tensors, ready_order=ready_order)
    if isinstance(config, DPConfig):
        return dp.simulate(workload, hardware, config)
    if isinstance(config, FSDPConfig):
        return fsdp.simulate(workload, hardware, config)
    return hsdp.simulate(workload, hardware, config)


def step_result(trace: Trace, device: int = 0) -> StepResult:
    """One step of `trace` split into compute and communication, hidden or exposed, with its
    peak memory. A trace a strategy simulated is read by that strategy; a recorded one (no
    state) from its events on `device`, as DDP's."""
    state = trace.state
    if isinstance(state, SingleState):
        return single.step_result(trace)
    if isinstance(state, DPState):
        return dp.step_result(trace)
    if isinstance(state, FSDPState):
        return fsdp.step_result(trace)
    if isinstance(state, HSDPState):
        return hsdp.step_result(trace)
    return ddp.step_result(trace, device)

