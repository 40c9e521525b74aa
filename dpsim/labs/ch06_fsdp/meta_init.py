"""Meta-device initialisation: build on `torch.device("meta")`, shard, then materialise.

`fully_shard` on a meta model makes meta shards; `to_empty(device=...)` allocates only
this rank's (padded) shards and `reset_parameters()` initialises them in place, so no rank
ever holds the full model. Building the full model first holds every parameter on every
rank before sharding. Peak bytes are measured with torch.profiler's memory timeline
(every CPU allocation and free inside the region, in time order; a free of memory
allocated before the region counts too, so the peak is measured above the start).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from dpsim.sim.checks import require_choice

T = TypeVar("T")
PATHS = ("meta", "full")


def allocation_peak(fn: Callable[[], T]) -> tuple[T, int]:
    """(fn(), the peak of bytes allocated and not yet freed while fn ran)."""
    from torch.profiler import ProfilerActivity, profile

    from dpsim.runtime.fsdp_record import quiet_stderr

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):  # nbytes < 0: a free
        live += e.nbytes()
        peak = max(peak, live)
    return result, peak


def materialize(model: nn.Module, device: str | torch.device = "cpu") -> nn.Module:
    """Allocate a meta model's (sharded) parameters on `device`, then run every module's
    own `reset_parameters` in module order (the order an eager build initialises them)."""
    model.to_empty(device=device)
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    return model


def build_sharded(make_model: Callable[[], nn.Module], mesh: Any, path: str) -> nn.Module:
    """`make_model()` on the meta device ("meta") or on the CPU ("full"), then `fully_shard`
    every block and the root; the meta path is materialised afterwards."""
    from torch.distributed.fsdp import fully_shard

    from dpsim.labs.ch06_fsdp.fsdp_train import blocks_of

    require_choice("path", path, PATHS)
    if path == "meta":
        with torch.device("meta"):
            model = make_model()
    else:
        model = make_model()
    for block in blocks_of(model):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return materialize(model) if path == "meta" else model
