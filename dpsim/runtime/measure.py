"""Measure the memory of a real training step by summing the tensors that exist.

The one home of byte counting on real tensors: a tensor's bytes, distinct storages'
bytes, optimizer state, and what autograd saves for backward (seen through
`torch.autograd.graph.saved_tensors_hooks`, counted once per storage, parameters
excluded). On CUDA, `torch.cuda` memory statistics are recorded too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

from dpsim.sim import MemoryBreakdown

SavedSize = Literal["storage", "view"]


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of `t`'s elements (numel x element size), whatever storage is behind it."""
    return t.numel() * t.element_size()


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel() > 0:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor in the optimizer's state (moments, momentum buffers, step counters)."""
    return [v for state in optimizer.state.values() for v in state.values()
            if isinstance(v, torch.Tensor)]


def model_state_breakdown(model: nn.Module, optimizer: torch.optim.Optimizer) -> MemoryBreakdown:
    """Measured bytes of parameters, gradients and optimizer state."""
    params = list(model.parameters())
    return MemoryBreakdown(
        parameters=storage_bytes(params),
        gradients=storage_bytes(p.grad for p in params if p.grad is not None),
        optimizer=storage_bytes(optimizer_tensors(optimizer)),
    )


@dataclass
class SavedTensors:
    """Storages autograd saved for backward while the context was open."""

    exclude: set[int] = field(default_factory=set)  # data pointers of storages left out
    storages: dict[int, int] = field(default_factory=dict)  # data pointer -> bytes

    @property
    def nbytes(self) -> int:
        """Bytes of distinct saved storages."""
        return sum(self.storages.values())


@contextmanager
def saved_tensors(exclude: Iterable[torch.Tensor] = (), *, size: SavedSize = "storage",
                  scalars: bool = True) -> Iterator[SavedTensors]:
    """Count the bytes autograd saves during the `with` block, once per storage.

    Storages behind `exclude` (parameters, inputs) and empty tensors are left out.
    size "storage": a storage counts its whole `nbytes()` (what memory holds); "view":
    the largest saved view of it, numel x element size (what a virtual device of the
    DataParallel re-enactment holds). scalars=False also leaves 0-dim tensors out
    (nll_loss's 4-byte `total_weight`).
    """
    record = SavedTensors(exclude={t.untyped_storage().data_ptr() for t in exclude})

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr in record.exclude or t.numel() == 0 or (not scalars and t.dim() == 0):
            return t
        if size == "view":
            record.storages[ptr] = max(record.storages.get(ptr, 0), tensor_bytes(t))
        else:
            record.storages[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield record


@dataclass
class StepMemory:
    """Measured memory of one training step."""

    breakdown: MemoryBreakdown
    cuda: dict[str, int] | None = None  # torch.cuda statistics in bytes, None on the CPU


def measure_step_memory(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = nn.functional.cross_entropy,
) -> StepMemory:
    """Run one step and return the bytes of each category at its peak (after forward)."""
    cuda = x.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(x.device)
        torch.cuda.reset_peak_memory_stats(x.device)
        before = torch.cuda.memory_allocated(x.device)
    optimizer.zero_grad(set_to_none=True)
    with saved_tensors(model.parameters()) as saved:
        loss = loss_fn(model(x), y)
    if cuda:
        after_forward = torch.cuda.memory_allocated(x.device)
    loss.backward()
    optimizer.step()
    states = model_state_breakdown(model, optimizer)
    stats = None
    if cuda:
        torch.cuda.synchronize(x.device)
        stats = {
            "allocated_before_step": before,
            "allocated_after_forward": after_forward,
            "peak_allocated": torch.cuda.max_memory_allocated(x.device),
            "reserved": torch.cuda.memory_reserved(x.device),
        }
    return StepMemory(
        MemoryBreakdown(states.parameters, states.gradients, states.optimizer, saved.nbytes),
        stats,
    )
