"""Count the collectives a rank issues and the bytes handed to each (chapters 6 and 8).

`CollectiveBytes` is a `TorchDispatchMode`: inside `with CollectiveBytes() as comm:` every
c10d collective that goes through torch's dispatcher is recorded with its kind, dtype and
the bytes of the largest tensor handed to it: the gathered output of an all-gather, the
full input of a reduce-scatter, the tensor of an all-reduce or broadcast. That is the
collective's payload (the unsharded size); a rank of a ring sends (N - 1) / N of it per
all-gather or reduce-scatter, twice that per all-reduce.

What it sees: `torch.distributed`'s Python calls (`dist.all_reduce`, ...), FSDP2's
all-gathers and reduce-scatters, and DDP's all-reduces once a comm hook is registered
(`register_comm_hook`; `default_hooks.allreduce_hook` is DDP's own all-reduce). DDP's
built-in C++ all-reduce, without a hook, calls the process group directly and is not seen.
A dispatch mode holds for its own thread only; a collective that a future's callback
issues on another thread (PowerSGD's second and third all-reduce run on gloo's thread) is
seen through `torch.distributed`'s functions in `OFF_THREAD`, which the `with` block wraps.

`sample`, if given, is called after every dispatched op (its result in bytes); the
largest value is kept in `peak_sample` (e.g. the bytes of parameters FSDP2 holds gathered).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

# c10d op name (torch.ops.c10d.<name>) -> kind
KINDS = {
    "_allgather_base_": "all_gather", "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
    "broadcast_": "broadcast",
}
# torch.distributed's functions watched on other threads -> kind
OFF_THREAD = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
              "reduce_scatter_tensor": "reduce_scatter", "broadcast": "broadcast"}


@dataclass(frozen=True)
class Collective:
    """One collective call: its kind, dtype and payload in bytes."""

    kind: str  # "all_gather", "reduce_scatter", "all_reduce", "broadcast" or the c10d op
    dtype: str  # e.g. "torch.float32"
    nbytes: int  # the largest tensor handed to it (the unsharded size)


def _tensors(args: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += _tensors(a)
    return out


class CollectiveBytes(TorchDispatchMode):
    """Record every c10d collective run inside the `with` block (see the module docstring)."""

    def __init__(self, sample: Callable[[], int] | None = None) -> None:
        super().__init__()
        self.calls: list[Collective] = []
        self.sample = sample
        self.peak_sample = 0
        self._thread = threading.get_ident()
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> CollectiveBytes:
        self._thread = threading.get_ident()
        self._saved = {name: getattr(dist, name) for name in OFF_THREAD}
        for name, real in self._saved.items():
            setattr(dist, name, self._watch(name, real))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for name, real in self._saved.items():
            setattr(dist, name, real)

    def _record(self, kind: str, args: Any) -> None:
        tensors = _tensors(args)
        if tensors:
            big = max(tensors, key=lambda t: t.nbytes)
            self.calls.append(Collective(kind, str(big.dtype), int(big.nbytes)))

    def _watch(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:  # the dispatch mode sees its own thread
                self._record(OFF_THREAD[name], (*args, *kwargs.values()))
            return real(*args, **kwargs)
        return call

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func.namespace == "c10d":
            name = func.__name__.split(".")[0]
            if name in KINDS and threading.get_ident() == self._thread:  # else: _watch
                self._record(KINDS[name], args)
        if self.sample is not None:
            self.peak_sample = max(self.peak_sample, int(self.sample()))
        return out

    def bytes_by_kind(self) -> dict[str, int]:
        """Bytes handed to each kind of collective, in the order first seen."""
        totals: dict[str, int] = {}
        for c in self.calls:
            totals[c.kind] = totals.get(c.kind, 0) + c.nbytes
        return totals

    def calls_by_kind(self) -> dict[str, int]:
        """Number of calls of each kind, in the order first seen."""
        counts: dict[str, int] = {}
        for c in self.calls:
            counts[c.kind] = counts.get(c.kind, 0) + 1
        return counts

    def total_bytes(self) -> int:
        """Bytes handed to every collective together."""
        return sum(c.nbytes for c in self.calls)
