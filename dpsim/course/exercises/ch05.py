"""Chapter 5 exercises: DistributedSampler's split, gradients averaged by hand, DDP's buckets.

Reference answers come from PyTorch itself (`DistributedSampler`, the bucket assignment
DDP's reducer calls, real gloo all-reduces) and are cross-checked with dpsim while the
cases are built (a disagreement is a bug in dpsim, raised as RuntimeError, never blamed
on the learner).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from dpsim.course.grading.ranks import join, run_specs
from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.models import layer_stack
from dpsim.sim import GradTensor, MiB, build_buckets

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
           contiguous: bool = False, pad: bool = True, pad_once: bool = False,
           pad_last: bool = False) -> list[int]:
    n = len(order)
    if drop_last:
        order = order[: n - n % world_size]
    elif pad and n % world_size:
        total = -(-n // world_size) * world_size
        if pad_last:
            order = order + order[-1:] * (total - n)
        else:
            order = ((order + order[: total - n]) if pad_once
                     else (order * (-(-total // n)))[:total])
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
        (2, 7, rng.choice([False, True]), False),  # padding longer than the data set
    ]
    for index, (n, ws, shuffle, drop_last) in enumerate(shapes):
        # fewer samples than ranks: a rank past the data set gets only padding; past twice
        # its length when it can, where padding only once leaves that rank nothing
        rank = rng.randrange(ws) if n >= ws else rng.randrange(min(2 * n, ws - 1), ws)
        seed = rng.randint(0, 99)
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
            "you padded only once: when the padding is longer than the list, repeat the "
            "list's first indices again and again until the length is a multiple of "
            "world_size": _split(_order(n, shuffle, seed + epoch), ws, rank, drop_last,
                                 pad_once=True),
            "you padded with the last index repeated; DistributedSampler pads with the "
            "list's first indices (indices[:padding], again and again if need be)":
                _split(_order(n, shuffle, seed + epoch), ws, rank, drop_last, pad_last=True),
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


def _case_model(hidden: int, seed: int, frozen: bool) -> nn.Module:
    torch.manual_seed(seed)
    model = layer_stack([6, hidden, 3])
    if frozen:
        model[0].requires_grad_(False)
    return model


def _grads(model: nn.Module) -> dict[str, list[float]]:
    return {n: p.grad.flatten().tolist() for n, p in model.named_parameters()
            if p.grad is not None}


def local_gradients(spec: dict[str, Any], rank: int) -> dict[str, list[float]]:
    """Rank `rank`'s own gradients in case `spec` (its own batch of 4), before averaging."""
    model = _case_model(spec["hidden"], spec["seed"], spec["frozen"])
    g = torch.Generator().manual_seed(1000 * spec["seed"] + rank)  # each rank its own batch
    x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
    nn.functional.cross_entropy(model(x), y).backward()
    return _grads(model)


def _average_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                    init_method: str, path: str) -> dict[str, list[float]]:
    """On a real rank: this rank's backward, then the learner's function; p.grad after it."""
    model = _case_model(spec["hidden"], spec["seed"], spec["frozen"])
    local = local_gradients(spec, rank)
    for name, p in model.named_parameters():
        if name in local:
            p.grad = torch.tensor(local[name]).reshape(p.shape)
    with join(rank, world_size, init_method):
        fn(model, world_size)
    return _grads(model)


def run_average(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
                ) -> list[dict[str, list[float]]]:
    """Every rank's p.grad after `fn` in case `index` (one launch serves every case)."""
    return run_specs(_average_worker, fn, specs)[index]


def _scaled(grads: list[dict[str, list[float]]], scale: float) -> dict[str, list[float]]:
    return {k: (torch.tensor([g[k] for g in grads], dtype=torch.float64).sum(0) * scale)
            .tolist() for k in grads[0]}


@exercise("5.2", function="average_gradients", title="Average gradients by hand, like DDP",
          points=2)
def _average_cases(rng: random.Random) -> Iterator[Case]:
    specs = [{"hidden": rng.choice([8, 16, 32]), "seed": rng.randint(1, 99), "frozen": frozen,
              "world_size": ws} for ws, frozen in ((2, False), (3, True), (3, False))]
    for index, spec in enumerate(specs):
        ws = spec["world_size"]
        local = [local_gradients(spec, r) for r in range(ws)]
        mean = _scaled(local, 1 / ws)
        label = (f"{ws} gloo ranks, Linear(6, {spec['hidden']}) -> ReLU -> "
                 f"Linear({spec['hidden']}, 3)"
                 + (", first Linear frozen (its p.grad is None)" if spec["frozen"] else "")
                 + ", each rank its own batch of 4")
        yield Case(label, args=(specs, index), expected=[mean] * ws,
                   call=run_average, rel_tol=1e-5, abs_tol=1e-7,
                   mistakes={
                       "you summed but did not divide by world_size": [_scaled(local, 1)] * ws,
                       "the gradients were never all-reduced (each rank kept its own)": local,
                       "you divided without all-reducing first":
                           [_scaled([g], 1 / ws) for g in local],
                       "you divided by world_size twice": [_scaled(local, 1 / ws**2)] * ws,
                       "dist.reduce leaves the result on one rank only; all_reduce leaves it "
                       "on every rank": [_scaled(local, 1), *local[1:]],
                   })


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


def _walk(sizes: list[int], caps: tuple[int, int], before: bool = False, strict: bool = False
          ) -> list[int]:
    """Bucket bytes of a walk over `sizes` (the order given) with caps (first, the rest):
    closed once a bucket holds at least its cap; `before` (a slip) closes it before adding
    the tensor that crosses the cap, `strict` (a slip) only once it exceeds the cap."""
    out: list[int] = []
    current = 0
    for nbytes in sizes:
        cap = caps[0] if not out else caps[1]
        if before and current and current + nbytes > cap:
            out.append(current)
            current = 0
        current += nbytes
        cap = caps[0] if not out else caps[1]
        if not before and (current > cap or (current == cap and not strict)):
            out.append(current)
            current = 0
    return out + ([current] if current else [])


def _exact_mb(nbytes: int) -> float:
    """`nbytes` as MiB, exactly (a dyadic float): int(mb * 2**20) gives nbytes back."""
    return nbytes / MiB


@exercise("5.3", function="bucket_sizes", title="The buckets DDP builds", points=2)
def _bucket_cases(rng: random.Random) -> Iterator[Case]:
    for index in range(5):
        while True:
            widths = [rng.randint(20, 300) for _ in range(rng.randint(3, 6))]
            module = layer_stack(widths, activation="none")
            sizes = [p.numel() * 4 for p in module.parameters()]
            total = sum(sizes)
            cap = round(rng.uniform(0.15, 0.4) * total / MiB, 3)
            first = round(rng.uniform(0.03, 0.1) * total / MiB, 3)
            if index == 3:  # 2% above the last three gradients: 10**6-byte MBs close earlier
                first = math.ceil(sum(sizes[-3:]) * 1.02 / MiB * 1e4) / 1e4
            if index == 1:  # the first bucket lands exactly on its cap: DDP closes it (>=)
                first = _exact_mb(sum(sizes[::-1][:rng.randint(1, 2)]))
            if index == 2:  # the second bucket lands exactly on bucket_cap_mb
                end = next((k for k in range(1, len(sizes) + 1)  # where the first closes
                            if sum(sizes[::-1][:k]) >= int(first * MiB)), len(sizes))
                if end >= len(sizes) - 1:
                    continue
                cap = _exact_mb(sum(sizes[::-1][end:end + rng.randint(2, 3)]))
            if cap <= 0 or first <= 0:  # a small model's cap rounded to 0.000 MiB: again
                continue
            expected = torch_bucket_sizes(module, cap, first)
            if index == 0 and _walk(sizes[::-1], (int(cap * MiB),) * 2) == expected:
                continue  # the first case must show a missing small first bucket
            # case 5: the last bucket is a partial one, below its cap
            lands = (_walk(sizes[::-1], (int(first * MiB), int(cap * MiB)), strict=True)
                     != expected)
            if index in (1, 2) and not lands:
                continue
            if index < 4 or (len(expected) > 2 and expected[-1] < int(cap * MiB)):
                break
        ours = build_buckets([GradTensor(str(i), s, i) for i, s in enumerate(sizes)], cap, first)
        if [b.nbytes for b in ours] != expected:
            raise RuntimeError("dpsim.sim.strategies.ddp.build_buckets disagrees with torch")
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
                       STRICT_CAP: _walk(sizes[::-1], caps, strict=True),
                   })


STRICT_CAP = ("you closed a bucket only once it went over the cap (>); DDP closes it as soon "
              "as it holds at least the cap (>=), so a bucket that lands exactly on the cap "
              "is closed")

