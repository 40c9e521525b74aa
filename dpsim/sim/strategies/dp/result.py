"""What a simulated DataParallel step reports: its `StepResult` and the DP-only numbers.

`dp.simulate` attaches a `DPState` to its trace; these read it back, typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.inputs import require_state
from dpsim.sim.trace import SimState, Trace


@dataclass(frozen=True)
class DPSummary:
    """What a simulated DP step records besides its StepResult (seconds, samples)."""

    samples_per_s: float  # global batch / step time
    chunk_sizes: tuple[int, ...]  # samples per device that got a chunk (torch.chunk)
    n_devices_used: int
    imbalance: float  # device 0's peak / the largest other peak (inf: no other)
    python_s: float  # seconds in which some thread held the GIL
    gil_s_per_op: float  # GIL held per dispatched operator
    phases: dict[str, tuple[float, float]]  # phase kind -> (first start_s, last end_s)
    loss_time_s: float  # when the loss is computed (`bytes_at_loss` holds then)


@dataclass(frozen=True)
class DPState(SimState):
    """What `dp.simulate` hands to `step_result` and `summary`."""

    n_devices: int  # devices the process drives (some may get no chunk)
    step_time_s: float
    peak_bytes: tuple[int, ...]  # per device, index = device
    summary: DPSummary


def summary(trace: Trace) -> DPSummary:
    """The DP-specific numbers of a trace `dp.simulate` made."""
    return require_state(trace, DPState, "dp").summary


def step_result(trace: Trace) -> StepResult:
    """The step of a trace `dp.simulate` made; host time beyond compute and comm is "other"."""
    s = cast(DPState, trace.state)
    n, step = s.n_devices, s.step_time_s
    compute = max(trace.busy_s(d, "compute") for d in range(n))
    comm = trace.busy_s(0, "comm")
    exposed = min(comm, max(0.0, step - compute))
    sent = sum(e.nbytes for e in trace.events if e.stream == "comm") // max(n, 1)
    return StepResult(step, compute, comm - exposed, exposed,
                      max(0.0, step - compute - exposed), s.peak_bytes,
                      int(sent), max(s.summary.chunk_sizes), n)
