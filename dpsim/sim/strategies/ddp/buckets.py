"""DDP's gradient buckets: which gradients are all-reduced together, in what order.

What torch 2.x does (torch/nn/parallel/distributed.py, `_BucketCapacityConfig`):

* first iteration, default `find_unused_parameters=False` (or `static_graph=True`):
  `compute_bucket_size_limits` returns `[sys.maxsize]`, so ONE bucket holds every
  gradient and is all-reduced once backward has produced them all
  (`first_iteration_buckets`);
* first iteration with `find_unused_parameters=True`: capped buckets over the reverse of
  the parameters, from construction;
* after the first iteration, DDP rebuilds its buckets in the order the gradients really
  became ready (`build_buckets(..., ready_order=...)`).

A bucket closes as soon as its bytes reach its cap: `first_bucket_cap_mb` for the first,
`bucket_cap_mb` after. The first cap is 1 MiB only when `bucket_cap_mb` is not passed;
an explicit `bucket_cap_mb` caps the first bucket too (`first_bucket_cap_for`).
`ddp.step.simulate` all-reduces the buckets while backward runs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import Each, Instance, Int, OneOf, Real, check_fields, require_int
from dpsim.sim.limits import MAX_BUCKET_CAP_MB, MAX_EXACT_COUNT, MAX_TENSORS
from dpsim.sim.strategies.inputs import shown
from dpsim.sim.workload import DTYPE_BYTES, Workload

MiB = 1024**2
DEFAULT_BUCKET_CAP_MB = 25.0  # torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB
DEFAULT_FIRST_BUCKET_CAP_MB = 1.0  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES / MiB
FIRST_ITERATION_CAP_BYTES = sys.maxsize  # torch: compute_bucket_size_limits -> [sys.maxsize]
CapMB = Annotated[float, Real(0, MAX_BUCKET_CAP_MB, low_inclusive=False)]  # a bucket cap, MiB
Dtype = Annotated[str, OneOf(tuple(DTYPE_BYTES))]  # "fp32", "bf16", "fp16"


def first_bucket_cap_for(bucket_cap_mb: CapMB | None = None) -> float:
    """The first bucket's cap (MiB) torch uses for a DDP built with `bucket_cap_mb`.

    None (not passed): 1 MiB, beside the 25 MiB default; an explicit value (even 25)
    caps the first bucket too (`_BucketCapacityConfig.create`).
    """
    if bucket_cap_mb is None:
        return DEFAULT_FIRST_BUCKET_CAP_MB
    return float(bucket_cap_mb)


@dataclass(frozen=True)
class GradTensor:
    """One gradient as DDP sees it."""

    name: str  # parameter name, e.g. "2.weight" (or a layer name)
    nbytes: Annotated[int, Int(0, MAX_EXACT_COUNT)]
    layer: Annotated[int, Int(0)] = 0  # index in Workload.layers of the layer whose backward
    # produces it

    def __post_init__(self) -> None:
        if (type(self.name) is str and type(self.nbytes) is int
                and 0 <= self.nbytes <= MAX_EXACT_COUNT and type(self.layer) is int
                and self.layer >= 0):
            return  # the common case (one per gradient of a simulated step): plain, in range
        check_fields(self)


@dataclass(frozen=True)
class Bucket:
    """A group of gradients all-reduced together."""

    index: int  # 0 = the first bucket to be ready (the model's last parameters)
    params: tuple[str, ...]  # in the order their gradients become ready
    nbytes: int
    cap_bytes: int  # the cap this bucket was filled against
    ready_layer: int  # the layer whose backward makes the bucket's last gradient ready


Tensors = Annotated[Sequence[GradTensor], Each(Instance(GradTensor), 0, MAX_TENSORS)]
Names = Annotated[Sequence[str], Each(Instance(str), 0, MAX_TENSORS)]


def build_buckets(tensors: Tensors, bucket_cap_mb: CapMB = DEFAULT_BUCKET_CAP_MB,
                  first_bucket_cap_mb: CapMB = DEFAULT_FIRST_BUCKET_CAP_MB,
                  ready_order: Names | None = None) -> list[Bucket]:
    """Capped buckets for gradients listed in parameter order (model.parameters()).

    Walks the tensors in the order their gradients become ready, closing a bucket as soon
    as its bytes reach its cap: `first_bucket_cap_mb` for bucket 0, `bucket_cap_mb` after.
    The order is the reverse of the parameters (torch's order at construction, used in
    the first iteration only with find_unused_parameters=True), or `ready_order` (tensor
    names): after the first iteration DDP rebuilds its buckets in the order the gradients
    really became ready, which differs for layers such as Conv2d (weight before bias).
    DDP's default first iteration is one bucket instead: `first_iteration_buckets`.
    """
    caps = (int(first_bucket_cap_mb * MiB), int(bucket_cap_mb * MiB))
    order = list(reversed(tensors))
    if ready_order is not None:  # the two lists must agree: every tensor's name once
        by_name = {t.name: t for t in tensors}
        if sorted(ready_order) != sorted(by_name) or len(by_name) != len(tensors):
            raise ValueError(f"ready_order={list(ready_order)!r} is not allowed; give every "
                             f"tensor name exactly once: {sorted(by_name)}")
        order = [by_name[name] for name in ready_order]
    buckets: list[Bucket] = []
    current: list[GradTensor] = []
    size = 0

    def close() -> None:
        cap = caps[0] if not buckets else caps[1]
        buckets.append(Bucket(len(buckets), tuple(t.name for t in current), size, cap,
                              min(t.layer for t in current)))

    for tensor in order:
        current.append(tensor)
        size += tensor.nbytes
        if size >= (caps[0] if not buckets else caps[1]):
            close()
            current, size = [], 0
    if current:
        close()
    return buckets


def first_iteration_buckets(tensors: Sequence[GradTensor]) -> list[Bucket]:
    """DDP's first iteration with find_unused_parameters=False: one bucket of every gradient.

    Its all-reduce can start only when backward has produced the last gradient (the
    first parameter's): nothing overlaps in that step.
    """
    if not tensors:
        return []
    order = list(reversed(tensors))
    return [Bucket(0, tuple(t.name for t in order), sum(t.nbytes for t in order),
                   FIRST_ITERATION_CAP_BYTES, min(t.layer for t in order))]


def grad_tensors(workload: Workload, dtype: Dtype = "fp32",
                 names: Annotated[Sequence[tuple[str, int]],
                                  Each(Instance((list, tuple)), 0, MAX_TENSORS)] | None = None
                 ) -> list[GradTensor]:
    """The gradients of `workload` in parameter order.

    Without `names`: one tensor per layer that has parameters (its gradients in `dtype`).
    With `names` [(parameter name, nbytes), ...] from a real model: one per parameter,
    each assigned to the layer whose name prefixes it.
    """
    if names is None:
        return [GradTensor(layer.name, layer.n_params * DTYPE_BYTES[dtype], i)
                for i, layer in enumerate(workload.layers) if layer.n_params > 0]
    owners = {layer.name: i for i, layer in enumerate(workload.layers)}
    fallback = owners.get("(non-leaf parameters)", 0)
    out = []
    for i, pair in enumerate(names):
        if len(pair) != 2 or not isinstance(pair[0], str):
            raise ValueError(f"names[{i}]={shown(pair)} is not allowed; allowed: a "
                             "(parameter name, nbytes) pair")
        name, nbytes = pair
        prefix, layer = name, fallback
        while "." in prefix:
            prefix = prefix.rsplit(".", 1)[0]
            if prefix in owners:
                layer = owners[prefix]
                break
        nbytes = require_int(f"names[{i}][1]", nbytes, 0, MAX_EXACT_COUNT)
        out.append(GradTensor(name, nbytes, layer))
    return out
