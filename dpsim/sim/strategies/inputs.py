"""What the strategies' face functions check beside their hints: a model that computes,
a trace made by the right strategy.

The face (`dpsim.sim`) checks each argument against its type hint; these check what a hint
cannot say, naming the argument. The planner's face still uses the plain ones (a Workload,
a Cluster, a list of names). Inner code trusts its typed inputs and calls none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from dpsim.sim.checks import require_choice, require_int
from dpsim.sim.hardware import Cluster
from dpsim.sim.trace import SimState, Trace
from dpsim.sim.workload import Workload

T = TypeVar("T")
S = TypeVar("S", bound=SimState)


def shown(value: object, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters (a Workload or a Trace prints every item)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def require_instance(field: str, value: object, cls: type[T], allowed: str) -> T:
    """Return `value` if it is a `cls`, else ValueError naming `field`."""
    if not isinstance(value, cls):
        raise ValueError(f"{field}={shown(value)} is not a {cls.__name__}; allowed: {allowed}")
    return value


def require_sequence(field: str, value: object, *, empty: bool = False) -> Sequence[object]:
    """Return `value` if it is a list or tuple (not a string), non-empty unless `empty`."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"{field}={shown(value)} is not a list or tuple; allowed: a list or "
                         "tuple of values")
    if not value and not empty:
        raise ValueError(f"{field}={value!r} is empty; allowed: at least one value")
    return value


def require_ints(field: str, values: object, low: int, high: int) -> list[int]:
    """A non-empty list or tuple of integers in [low, high], each named `field[i]`."""
    seq = require_sequence(field, values)
    return [require_int(f"{field}[{i}]", v, low, high) for i, v in enumerate(seq)]  # type: ignore[arg-type]


def require_names(field: str, values: object, allowed: Sequence[str]) -> list[str]:
    """A non-empty list or tuple of names, each one of `allowed`, each named `field[i]`."""
    seq = require_sequence(field, values)
    return [require_choice(f"{field}[{i}]", v, allowed) for i, v in enumerate(seq)]  # type: ignore[misc]


def require_workload(workload: object, field: str = "workload", *,
                     runnable: bool = True) -> Workload:
    """`workload` if it is a Workload (which checks its own numbers when built).

    runnable: it also has a layer that computes (FLOPs or output bytes), so that a step
    takes time; a workload only listing parameters (`ddp.grad_tensors`) needs not.
    """
    w = require_instance(field, workload, Workload,
                         "a dpsim.sim.workload.Workload, e.g. get_workload('gpt2-124m')")
    if runnable and not any(layer.flops or layer.output_bytes for layer in w.layers):
        raise ValueError(f"{field}={shown(w)} has no layer that computes; allowed: a workload "
                         "with a layer whose flops or output_bytes is above 0")
    return w


def require_cluster(cluster: object, field: str = "cluster") -> Cluster:
    """`cluster` if it is a Cluster (which checks its device and links when built)."""
    return require_instance(field, cluster, Cluster,
                            "a dpsim.sim.hardware.Cluster, e.g. get_cluster('h100-node')")


def require_state(trace: Trace, state_type: type[S], strategy: str, field: str = "trace") -> S:
    """The typed state of `trace` (a Trace) if `strategy`'s simulate made it."""
    if not isinstance(trace.state, state_type):
        made_by = "no simulator" if trace.state is None else type(trace.state).__name__
        raise ValueError(f"{field}={shown(trace)} was not made by strategies.{strategy}.simulate "
                         f"(its state is from {made_by}); allowed: a trace that "
                         f"{strategy}.simulate returned")
    return trace.state
