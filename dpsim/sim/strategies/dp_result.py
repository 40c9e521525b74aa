"""What a simulated DataParallel step reports: its `StepResult` and the DP-only numbers.

`dp.simulate` writes them into its trace's meta; these read them back, typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.inputs import require_trace
from dpsim.sim.trace import Trace


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


def summary(trace: Trace) -> DPSummary:
    """The DP-specific numbers of a trace `dp.simulate` made."""
    m = require_trace(trace, "dp").meta
    return DPSummary(m["samples_per_s"], tuple(m["chunk_sizes"]), m["n_devices_used"],
                     m["imbalance"], m["python_s"], m["gil_s_per_op"],
                     {k: (v[0], v[1]) for k, v in m["phases"].items()}, m["loss_time_s"])


def step_result(trace: Trace) -> StepResult:
    """The step of a trace `dp.simulate` made; host time beyond compute and comm is "other"."""
    m = require_trace(trace, "dp").meta
    n, step = m["n_devices"], m["step_time_s"]
    compute = max(trace.busy_s(d, "compute") for d in range(n))
    comm = trace.busy_s(0, "comm")
    exposed = min(comm, max(0.0, step - compute))
    sent = sum(e.nbytes for e in trace.events if e.stream == "comm") // max(n, 1)
    return StepResult(step, compute, comm - exposed, exposed,
                      max(0.0, step - compute - exposed), tuple(int(p) for p in m["peak_bytes"]),
                      int(sent), max(m["chunk_sizes"]), n)
