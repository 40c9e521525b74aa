"""Chapter 5 exercises: DistributedSampler's split, gradients averaged by hand, DDP's buckets.

Reference answers come from PyTorch itself (`DistributedSampler`, the bucket assignment
DDP's reducer calls, real gloo all-reduces) and are cross-checked with dpsim while the
cases are built (a disagreement is a bug in dpsim, raised as RuntimeError, never blamed
on the learner).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from dpsim.course.grading.core import Case, exercise
from dpsim.course.grading.gradient_average import AVERAGE as AVERAGE
from dpsim.course.grading.gradient_average import (
    SPECS,
    average_on_ranks,
    combine,
    explain_average,
    local_grads,
)
from dpsim.course.grading.gradient_average import classify as classify
from dpsim.strategies.ddp import GradTensor, MiB, build_buckets

# --- 5.1 ----------------------------------------------------------------------------------


def sampler_indices(n_samples: int, world_size: int, rank: int, shuffle: bool, seed: int,
                    epoch: int, drop_last: bool) -> list[int]:
    """The indices torch's DistributedSampler gives `rank` in `epoch`."""
    sampler: DistributedSampler[int] = DistributedSampler(
        range(n_samples), num_replicas=world_size, rank=rank,  # type: ignore[arg-type]
        shuffle=shuffle, seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def _order(n: int, shuffle: bool, seed: int) -> list[int]:
    if not shuffle:
        return list(range(n))
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()


def _split(order: list[int], world_size: int, rank: int, drop_last: bool,
           contiguous: bool = False, pad: bool = True) -> list[int]:
    n = len(order)
    if drop_last:
        order = order[: n - n % world_size]
    elif pad and n % world_size:
        total = -(-n // world_size) * world_size
        order = (order * (-(-total // n)))[:total]
    if contiguous:
        size = len(order) // world_size
        return order[rank * size:(rank + 1) * size]
    return order[rank::world_size]


@exercise("5.1", function="rank_indices", title="What DistributedSampler gives each rank",
          points=2)
def _sampler_cases(rng: random.Random) -> Iterator[Case]:
    shapes = [  # n_samples, world_size, shuffle, drop_last
        (10, 4, False, False), (rng.randint(20, 60), 3, True, False),
        (rng.randint(20, 60) * 4 + 3, 4, True, True), (3, 5, False, False),
        (rng.randint(15, 40), 2, True, False),
    ]
    for index, (n, ws, shuffle, drop_last) in enumerate(shapes):
        rank, seed = rng.randrange(ws), rng.randint(0, 99)
        epoch = 0 if index == 0 else rng.randint(1, 9)
        expected = sampler_indices(n, ws, rank, shuffle, seed, epoch, drop_last)
        if expected != _split(_order(n, shuffle, seed + epoch), ws, rank, drop_last):
            raise RuntimeError("dpsim's model of DistributedSampler disagrees with torch")
        kwargs = {"shuffle": shuffle, "seed": seed, "epoch": epoch, "drop_last": drop_last}
        label = f"rank_indices({n}, {ws}, {rank}, " + ", ".join(
            f"{k}={v}" for k, v in kwargs.items()) + ")"
        yield Case(label, args=(n, ws, rank), kwargs=kwargs, expected=expected, mistakes={
            "you shuffled with `seed` alone; the generator is seeded with seed + epoch, so "
            "every epoch has a new order": _split(_order(n, shuffle, seed), ws, rank,
                                                  drop_last),
            "you gave each rank a contiguous block; DistributedSampler deals indices like "
            "cards: rank r takes positions r, r + N, r + 2N, ...":
                _split(_order(n, shuffle, seed + epoch), ws, rank, drop_last, contiguous=True),
            "you did not pad: without drop_last, the list is padded with its own first "
            "indices up to a multiple of world_size, so every rank gets as many":
                _split(_order(n, shuffle, seed + epoch), ws, rank, drop_last, pad=False),
            "you padded although drop_last=True (it drops the tail instead)":
                _split(_order(n, shuffle, seed + epoch), ws, rank, False) if drop_last
                else None,
            "you dropped the tail although drop_last=False (it pads instead)":
                _split(_order(n, shuffle, seed + epoch), ws, rank, True) if not drop_last
                else None,
            "you shuffled although shuffle=False": _split(_order(n, True, seed + epoch), ws,
                                                          rank, drop_last)
            if not shuffle else None,
        })


# --- 5.2 ----------------------------------------------------------------------------------
# (the harness and what the grader computes: dpsim.course.grading.gradient_average)
@exercise("5.2", function="average_gradients", title="Average gradients by hand, like DDP",
          points=2)
def _average_cases(rng: random.Random) -> Iterator[Case]:
    for index, (hidden, _, frozen) in enumerate(SPECS):
        label = (f"2 gloo ranks, Linear(6, {hidden}) -> ReLU -> Linear({hidden}, 3)"
                 + (", first Linear frozen (its p.grad is None)" if frozen else "")
                 + ", each rank its own batch of 4")
        local = local_grads(index)
        average = combine([{"local": loc} for loc in local], 1 / len(local))
        yield Case(label, args=(index,), expected={"ranks": [average] * len(local)},
                   rel_tol=1e-5, abs_tol=1e-7, call=average_on_ranks,
                   explain=functools.partial(explain_average, local))


# --- 5.3 ----------------------------------------------------------------------------------


def torch_bucket_sizes(module: nn.Module, bucket_cap_mb: float, first_bucket_cap_mb: float
                       ) -> list[int]:
    """Bucket bytes from the function DDP's reducer calls, on the gradient-ready order."""
    params = [p for p in module.parameters()]
    ready = list(range(len(params)))[::-1]  # Linear layers: reverse parameter order
    limits = [int(first_bucket_cap_mb * MiB), int(bucket_cap_mb * MiB)]
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in ready], limits, [False] * len(params), ready)
    nbytes = [p.numel() * p.element_size() for p in params]
    return [sum(nbytes[i] for i in b) for b in buckets]


def _walk(sizes: list[int], caps: tuple[int, int], before: bool = False) -> list[int]:
    out: list[int] = []
    current = 0
    for nbytes in sizes:
        cap = caps[0] if not out else caps[1]
        if before and current and current + nbytes > cap:
            out.append(current)
            current = 0
        current += nbytes
        if not before and current >= (caps[0] if not out else caps[1]):
            out.append(current)
            current = 0
    return out + ([current] if current else [])


@exercise("5.3", function="bucket_sizes", title="The buckets DDP builds", points=2)
def _bucket_cases(rng: random.Random) -> Iterator[Case]:
    for index in range(4):
        widths = [rng.randint(20, 300) for _ in range(rng.randint(3, 6))]
        module = nn.Sequential(*[nn.Linear(a, b) for a, b in itertools.pairwise(widths)])
        sizes = [p.numel() * 4 for p in module.parameters()]
        total = sum(sizes)
        cap = round(rng.uniform(0.15, 0.4) * total / MiB, 3)
        first = round(rng.uniform(0.03, 0.1) * total / MiB, 3)
        if index == 3:  # 2% above the last three gradients: 10**6-byte MBs close earlier
            first = math.ceil(sum(sizes[-3:]) * 1.02 / MiB * 1e4) / 1e4
        expected = torch_bucket_sizes(module, cap, first)
        ours = build_buckets([GradTensor(str(i), s, i) for i, s in enumerate(sizes)], cap, first)
        if [b.nbytes for b in ours] != expected:
            raise RuntimeError("dpsim.strategies.ddp.build_buckets disagrees with torch")
        caps = (int(first * MiB), int(cap * MiB))
        yield Case(f"bucket_sizes({sizes}, bucket_cap_mb={cap}, first_bucket_cap_mb={first})",
                   args=(sizes, cap, first), expected=expected, mistakes={
                       "you walked the parameters forward; gradients (and buckets) come in "
                       "reverse order": _walk(sizes, caps),
                       "you forgot the small first bucket": _walk(sizes[::-1], (caps[1],) * 2),
                       "you closed a bucket before adding the tensor that crosses the cap; "
                       "DDP adds it, then closes": _walk(sizes[::-1], caps, before=True),
                       "you used MB = 10**6 bytes; DDP's MB is MiB = 2**20 bytes":
                           _walk(sizes[::-1], (int(first * 1e6), int(cap * 1e6))),
                   })
