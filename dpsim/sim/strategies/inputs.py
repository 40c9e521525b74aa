"""What the strategies and the planner accept next to a config: a model, hardware, a trace.

Configs check their own fields with `dpsim.sim.checks`; these check the objects passed
beside them, so that a wrong object is a ValueError naming the argument (not an
AttributeError deep in a simulation). Workload, Layer, Device, Link and Cluster refuse bad
numbers themselves when they are built (dpsim.sim.workload, dpsim.sim.hardware).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from dpsim.sim.checks import require_choice, require_int
from dpsim.sim.cost.memory import OPTIMIZERS, PRECISIONS
from dpsim.sim.hardware import Cluster, Device, Link
from dpsim.sim.limits import MAX_BATCH, MAX_WORLD_SIZE
from dpsim.sim.trace import SimState, Trace
from dpsim.sim.workload import DTYPE_BYTES, Workload

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


def require_device(device: object, field: str = "device") -> Device:
    """`device` if it is a Device (which refuses non-finite numbers when built)."""
    return require_instance(field, device, Device,
                            "a dpsim.sim.hardware.Device, e.g. get_device('h100-80gb')")


def require_link(link: object, field: str = "link") -> Link:
    """`link` if it is a Link (which refuses non-finite numbers when built)."""
    return require_instance(field, link, Link, "a dpsim.sim.hardware.Link, e.g. hardware.NVLINK4")


def require_cluster(cluster: object, field: str = "cluster") -> Cluster:
    """`cluster` if it is a Cluster (which checks its device and links when built)."""
    return require_instance(field, cluster, Cluster,
                            "a dpsim.sim.hardware.Cluster, e.g. get_cluster('h100-node')")


def require_trace(trace: object, field: str = "trace") -> Trace:
    """`trace` if it is a Trace."""
    return require_instance(field, trace, Trace, "a dpsim.sim.trace.Trace")


def require_state(trace: object, state_type: type[S], strategy: str, field: str = "trace") -> S:
    """The typed state of `trace` if `strategy`'s simulate made it (`Trace.state`)."""
    t = require_trace(trace, field)
    if not isinstance(t.state, state_type):
        made_by = "no simulator" if t.state is None else type(t.state).__name__
        raise ValueError(f"{field}={shown(t)} was not made by strategies.{strategy}.simulate "
                         f"(its state is from {made_by}); allowed: a trace that "
                         f"{strategy}.simulate returned")
    return t.state


def require_config(config: object, cls: type[T]) -> T:
    """`config` if it is the strategy's config class."""
    return require_instance("config", config, cls, f"a {cls.__module__}.{cls.__name__}")


def require_step_time(step_s: float, hardware: Cluster | Device, field: str = "cluster"
                      ) -> float:
    """A simulated step's seconds, refused when extreme (finite) rates made them infinite."""
    if not math.isfinite(step_s):
        raise ValueError(f"{field}={shown(hardware)} gives a step of {step_s!r} s; allowed: "
                         "a device and links whose rates give a finite step time")
    return step_s


def require_make_config(batch_per_device: int, global_batch: int, n_devices: int,
                        optimizer: str, precision: str) -> None:
    """Check the arguments every `Strategy.make_config` takes."""
    require_int("batch_per_device", batch_per_device, 1, MAX_BATCH)
    require_int("global_batch", global_batch, 1, MAX_BATCH)
    require_int("n_devices", n_devices, 1, MAX_WORLD_SIZE)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_choice("precision", precision, PRECISIONS)


def require_split(n_devices: int, global_batch: int) -> None:
    """Check the arguments every `Strategy.split_batch` takes."""
    require_int("n_devices", n_devices, 1, MAX_WORLD_SIZE)
    require_int("global_batch", global_batch, 1, MAX_BATCH)


def require_terms(workload: Workload, dtype: str) -> None:
    """Check the arguments every `Strategy.crossover_terms` takes."""
    require_workload(workload, runnable=False)
    require_choice("dtype", dtype, DTYPE_BYTES)
