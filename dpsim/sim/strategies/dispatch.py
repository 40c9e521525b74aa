"""One `simulate` and `step_result` for every strategy: the config's type (or the trace's
state) says which strategy's own function runs.

These are the strategies' face: the hints check each argument (`checks.checked`), and the
code below what relates them (a Device for SingleConfig, the tensors' layers, DP's node,
HSDP's mesh, a device of the trace). The strategies' own functions trust their inputs.
"""

from __future__ import annotations

from dpsim.sim.hardware import Cluster, Device
from dpsim.sim.limits import DeviceIndex
from dpsim.sim.strategies import ddp, dp, fsdp, single
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.ddp import DDPConfig
from dpsim.sim.strategies.ddp.buckets import Names, Tensors
from dpsim.sim.strategies.dp import DPConfig, DPState
from dpsim.sim.strategies.dp.step import check_node
from dpsim.sim.strategies.fsdp import FSDPConfig, FSDPState, hsdp
from dpsim.sim.strategies.fsdp.hsdp import HSDPConfig, HSDPState
from dpsim.sim.strategies.inputs import require_workload, shown
from dpsim.sim.strategies.single import SingleConfig, SingleState
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload

StrategyConfig = SingleConfig | DPConfig | DDPConfig | FSDPConfig | HSDPConfig
CONFIGS = (SingleConfig, DPConfig, DDPConfig, FSDPConfig, HSDPConfig)


def simulate(workload: Workload, hardware: Cluster | Device, config: StrategyConfig, *,
             tensors: Tensors | None = None, ready_order: Names | None = None) -> Trace:
    """One simulated training step of `workload` on `hardware`, trained as `config` says.

    The config's type picks the strategy: SingleConfig (`hardware` is a Device), DPConfig,
    DDPConfig, FSDPConfig (ZeRO stage `config.stage`) or HSDPConfig (`hardware` is a
    Cluster). `tensors` and `ready_order` are DDP's: the gradients as a real model has them,
    and the order backward makes them ready (names).
    """
    require_workload(workload)  # a layer that computes, so that a step takes time
    if (tensors is not None or ready_order is not None) and not isinstance(config, DDPConfig):
        raise ValueError(f"tensors and ready_order are given with config={shown(config)}; allowed: "
                         "only with a DDPConfig")
    if isinstance(config, SingleConfig):
        if not isinstance(hardware, Device):
            raise ValueError(f"hardware={shown(hardware)} is not a Device; allowed: a Device for "
                             "SingleConfig, e.g. get_device('h100-80gb')")
        return single.simulate(workload, hardware, config)
    if not isinstance(hardware, Cluster):
        raise ValueError(f"hardware={shown(hardware)} is not a Cluster; allowed: a Cluster for "
                         f"{type(config).__name__}, e.g. get_cluster('h100-node')")
    if isinstance(config, DDPConfig):
        last = len(workload.layers) - 1
        for i, tensor in enumerate(tensors or ()):
            if tensor.layer > last:
                raise ValueError(f"tensors[{i}].layer={tensor.layer} is out of range; allowed "
                                 f">= 0 and <= {last} (a layer of the workload)")
        return ddp.simulate(workload, hardware, config, tensors=tensors, ready_order=ready_order)
    if isinstance(config, DPConfig):
        check_node(hardware, config)
        return dp.simulate(workload, hardware, config)
    if isinstance(config, FSDPConfig):
        return fsdp.simulate(workload, hardware, config)
    hsdp.check_mesh(hardware, config)
    return hsdp.simulate(workload, hardware, config)


def step_result(trace: Trace, device: DeviceIndex = 0) -> StepResult:
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
    if not trace.events:
        raise ValueError(f"trace={shown(trace)} has no events; allowed: a trace a strategy "
                         "simulated, or a recording of a real DDP run")
    devices = sorted({e.device for e in trace.events})
    if device not in devices:
        raise ValueError(f"device={device} has no events in this trace; allowed: {devices}")
    return ddp.step_result(trace, device)

