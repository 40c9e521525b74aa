"""What the strategies' and the planner's face functions check beside their hints: a model
that computes, a trace made by the right strategy.

The face (`dpsim.sim`) checks each argument against its type hint (a Workload, a Trace);
these check what a hint cannot say, naming the argument. Inner code trusts its typed
inputs and calls none of them.
"""

from __future__ import annotations

from typing import TypeVar

from dpsim.sim.trace import SimState, Trace
from dpsim.sim.workload import Workload

S = TypeVar("S", bound=SimState)


def shown(value: object, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters (a Workload or a Trace prints every item)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def require_workload(workload: Workload, field: str = "workload") -> Workload:
    """`workload` (a Workload) if it has a layer that computes (FLOPs or output bytes), so
    that a step takes time."""
    if not any(layer.flops or layer.output_bytes for layer in workload.layers):
        raise ValueError(f"{field}={shown(workload)} has no layer that computes; allowed: a "
                         "workload with a layer whose flops or output_bytes is above 0")
    return workload


def require_state(trace: Trace, state_type: type[S], strategy: str, field: str = "trace") -> S:
    """The typed state of `trace` (a Trace) if `strategy`'s simulate made it."""
    if not isinstance(trace.state, state_type):
        made_by = "no simulator" if trace.state is None else type(trace.state).__name__
        raise ValueError(f"{field}={shown(trace)} was not made by strategies.{strategy}.simulate "
                         f"(its state is from {made_by}); allowed: a trace that "
                         f"{strategy}.simulate returned")
    return trace.state
