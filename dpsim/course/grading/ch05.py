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
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from dpsim.course.grading.core import Case, exercise, rank_error
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

AVERAGE = "every rank holds the average of the ranks' gradients"
_SPECS = [  # (hidden, seed, frozen first layer)
    (16, 1, False), (8, 2, True), (32, 3, False),
]


def _case_model(hidden: int, seed: int, frozen: bool) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, hidden), nn.ReLU(), nn.Linear(hidden, 3))
    if frozen:
        model[0].requires_grad_(False)
    return model


def _grads(model: nn.Module) -> dict[str, list[float]]:
    return {n: p.grad.flatten().tolist() for n, p in model.named_parameters()
            if p.grad is not None}


def _average_rank(rank: int, world_size: int, fn: Callable[..., Any]
                  ) -> list[dict[str, dict[str, list[float]]]]:
    """On a real rank: each case's local gradients, then what `fn` left in p.grad."""
    out = []
    for hidden, seed, frozen in _SPECS:
        model = _case_model(hidden, seed, frozen)
        g = torch.Generator().manual_seed(1000 * seed + rank)  # each rank its own batch
        x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
        nn.functional.cross_entropy(model(x), y).backward()
        local = _grads(model)
        fn(model, world_size)
        out.append({"local": local, "after": _grads(model)})
    return out


def _close(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    return a.keys() == b.keys() and all(
        torch.allclose(torch.tensor(a[k]), torch.tensor(b[k]), rtol=1e-5, atol=1e-7)
        for k in a)


def _combine(ranks: list[dict[str, dict[str, list[float]]]], scale: float
             ) -> dict[str, list[float]]:
    out = {}
    for k in ranks[0]["local"]:
        total = torch.zeros(len(ranks[0]["local"][k]), dtype=torch.float64)
        for r in ranks:
            total += torch.tensor(r["local"][k], dtype=torch.float64)
        out[k] = (total * scale).tolist()
    return out


def classify(ranks: list[dict[str, dict[str, list[float]]]]) -> str:
    """In words, what the gradients on every rank are after the learner's function."""
    n = len(ranks)
    afters = [r["after"] for r in ranks]
    if any(a.keys() != ranks[0]["local"].keys() for a in afters):
        return "some gradients were removed or added (p.grad changed to None or created)"
    for words, scale in ((AVERAGE, 1 / n), ("the sum of the ranks' gradients", 1.0),
                         ("the average divided by world_size once more", 1 / n**2)):
        target = _combine(ranks, scale)
        hits = [_close(a, target) for a in afters]
        if all(hits):
            return words
        if hits[0]:
            return f"rank 0 holds {words.removeprefix('every rank holds ')}, other ranks not"
    if all(_close(r["after"], r["local"]) for r in ranks):
        return "each rank still holds its own gradients (nothing was all-reduced)"
    return "the gradients are neither the ranks' average nor their sum"


def _dry_run(fn: Callable[..., Any], pretend: bool = False) -> dict[str, str] | None:
    """Call `fn` here, without a process group; a verdict if it never tried to communicate.

    First on a model whose first Linear is frozen (its p.grad is None), then on one with
    every gradient. A function that all-reduces stops at its first collective ("Default
    process group has not been initialized"): the sign to launch real ranks. With
    `pretend`, `dist.is_initialized()` answers True meanwhile, so a function guarded by
    it goes on to its first collective too.
    """
    for frozen in (True, False):
        model = _case_model(4, 0, frozen=frozen)
        nn.functional.cross_entropy(model(torch.randn(2, 6)), torch.tensor([0, 1])).backward()
        before = _grads(model)
        real = dist.is_initialized
        if pretend:
            dist.is_initialized = lambda: True
        try:
            returned = fn(model, 2)
        except (ValueError, RuntimeError) as exc:
            if "process group" in str(exc):
                return None
            raise
        finally:
            dist.is_initialized = real
        if returned is not None:
            return {"dry_run": "returned", "value": repr(returned)[:200]}
        if not frozen:
            return {"dry_run": "unchanged" if _close(_grads(model), before) else "changed"}
    return None


_AVERAGE_RUNS: list[tuple[Any, Any]] = []  # (fn, per-rank results or the error), in the sandbox


def _run_average(fn: Callable[..., Any]) -> Any:
    """Dry run in this process, then one real launch of 2 gloo ranks for every case."""
    for known, outcome in _AVERAGE_RUNS:
        if known is fn:
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
    try:
        outcome = _dry_run(fn)
        if outcome is not None and outcome["dry_run"] != "returned":
            outcome = _dry_run(fn, pretend=True)  # a dist.is_initialized() guard?
        if outcome is None:
            from dpsim.runtime.launch import RankFailedError, launch

            try:
                outcome = launch(_average_rank, 2, args=(fn,), backend="gloo", timeout_s=60)
            except RankFailedError as exc:
                raise rank_error(exc) from None
    except Exception as exc:
        _AVERAGE_RUNS.append((fn, exc))
        raise
    _AVERAGE_RUNS.append((fn, outcome))
    return outcome


def average_on_ranks(fn: Callable[..., Any], index: int) -> Any:
    """Harness of 5.2 (runs in the sandbox): each rank's gradients after `fn`, one model;
    or the dry run's verdict when `fn` never tried to communicate."""
    outcome = _run_average(fn)
    if isinstance(outcome, dict):
        return outcome
    return {"ranks": [rank[index]["after"] for rank in outcome]}


def _local_grads(index: int, world_size: int = 2) -> list[dict[str, list[float]]]:
    """Each rank's own gradients for model `index` (as `_average_rank` makes them)."""
    hidden, seed, frozen = _SPECS[index]
    out = []
    for rank in range(world_size):
        model = _case_model(hidden, seed, frozen)
        g = torch.Generator().manual_seed(1000 * seed + rank)
        x, y = torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
        nn.functional.cross_entropy(model(x), y).backward()
        out.append(_grads(model))
    return out


_AVERAGE_HINTS = {
    "the sum of the ranks' gradients": "you summed but did not divide by world_size",
    "each rank still holds its own gradients (nothing was all-reduced)":
        "the gradients were never all-reduced",
    "the average divided by world_size once more": "you divided by world_size twice",
}


def explain_average(local: list[dict[str, list[float]]], answer: Any) -> str | None:
    """Grader-side hint of 5.2 from the plain answer."""
    if not isinstance(answer, dict):
        return None
    verdict = answer.get("dry_run")
    if verdict == "returned":
        return (f"your function returned {answer.get('value')}; change p.grad in place and "
                "return None")
    if verdict == "unchanged":
        return "the gradients were never all-reduced"
    if verdict == "changed":
        return "you divided without all-reducing first"
    try:
        words = classify([{"local": loc, "after": after}
                          for loc, after in zip(local, answer["ranks"], strict=True)])
    except (KeyError, TypeError, ValueError, RuntimeError):
        return None
    if words.startswith("rank 0 holds"):
        return ("dist.reduce leaves the result on one rank only; all_reduce leaves it on every "
                "rank")
    return _AVERAGE_HINTS.get(words, words)


@exercise("5.2", function="average_gradients", title="Average gradients by hand, like DDP",
          points=2)
def _average_cases(rng: random.Random) -> Iterator[Case]:
    for index, (hidden, _, frozen) in enumerate(_SPECS):
        label = (f"2 gloo ranks, Linear(6, {hidden}) -> ReLU -> Linear({hidden}, 3)"
                 + (", first Linear frozen (its p.grad is None)" if frozen else "")
                 + ", each rank its own batch of 4")
        local = _local_grads(index)
        average = _combine([{"local": loc} for loc in local], 1 / len(local))
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
