"""Record a real FSDP2 step: torch.profiler ranges and torch.cuda memory -> a measured Trace.

FSDP2 labels its work with `record_function` ranges: `FSDP::all_gather (unit)`,
`FSDP::pre_forward (unit)` / `FSDP::post_forward (unit)`, `FSDP::pre_backward (unit)`,
`FSDP::post_backward_accumulate (unit)`, `FSDP::post_backward_reduce (unit)`; the root unit
has no "(unit)" suffix. Compute is the time between a unit's pre- and post- hooks.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from dpsim.sim import Event, Trace


def profile_to_trace(prof: Any, rank: int) -> Trace:
    """FSDP's ranges and the optimizer step from torch.profiler, as a measured Trace."""
    spans: list[tuple[str, float, float]] = [
        (e.name, e.time_range.start * 1e-6, e.time_range.end * 1e-6) for e in prof.events()
        if e.name.startswith(("FSDP::", "Optimizer.step"))]
    t0 = min((s for _, s, _ in spans), default=0.0)
    trace = Trace("measured", meta={"rank": rank})
    opens: dict[tuple[str, str], float] = {}
    for name, start, end in sorted(spans, key=lambda s: s[1]):
        unit = name[name.find("(") + 1:name.rfind(")")] if "(" in name else ""
        label = unit or "root"
        if name == "FSDP::all_gather" or name.startswith("FSDP::all_gather ("):
            trace.add(Event(rank, "comm", "all_gather", start - t0, end - t0, 0, label))
        elif name.startswith("FSDP::post_backward_reduce"):
            trace.add(Event(rank, "comm", "reduce_scatter", start - t0, end - t0, 0, label))
        elif name.startswith("Optimizer.step"):
            trace.add(Event(rank, "compute", "optimizer", start - t0, end - t0, 0, "adam"))
        elif name.startswith(("FSDP::pre_forward", "FSDP::pre_backward")):
            opens[(name.split(" ")[0][len("FSDP::pre_"):], label)] = end
        elif name.startswith(("FSDP::post_forward", "FSDP::post_backward_accumulate")):
            kind = "forward" if "forward" in name else "backward"
            began = opens.pop((kind, label), None)
            if began is not None and unit and start >= began:
                trace.add(Event(rank, "compute", kind, began - t0, start - t0, 0, label))
    return trace


@contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (the profiler's C++ start/stop lines) for a moment."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class CudaSampler:
    """torch.cuda.memory_allocated at every block's forward and backward, as "other" bytes."""

    def __init__(self, blocks: list[nn.Module], rank: int) -> None:
        self.rank = rank
        self.t0 = time.perf_counter()
        self.samples: list[tuple[float, int]] = []
        self.handles = []
        for block in blocks:
            self.handles.append(block.register_forward_pre_hook(lambda *_: self.sample()))
            self.handles.append(block.register_forward_hook(self.after_forward))
        self.sample()

    def sample(self) -> None:
        self.samples.append((time.perf_counter() - self.t0, torch.cuda.memory_allocated()))

    def after_forward(self, module: nn.Module, inputs: Any, output: Any) -> None:
        self.sample()
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda grad: self.sample())

    def close(self, trace: Trace) -> Trace:
        self.sample()
        for h in self.handles:
            h.remove()
        for time_s, nbytes in self.samples:
            trace.sample(self.rank, time_s, "other", nbytes)
        trace.meta["memory_note"] = ("torch.cuda.memory_allocated, every category together; "
                                   "times from the first block hook (own clock)")
        return trace
