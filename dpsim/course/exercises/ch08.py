"""Chapter 8 exercises: write the measurement that tests a claim, on real gloo ranks.

The learner's function runs inside a process group on every rank (the check joins it) and
measures what DDP does: the parameters after wrapping (8.1), the gradients after backward
against the local ones and their mean (8.2), the buckets DDP all-reduces (8.3). The
expected numbers are computed in one process with torch (the same models and batches; the
mean of the ranks' local gradients; the bucket assignment DDP's reducer calls); for 8.3
the check also looks at the gradients the learner's DDP left (a comm hook that records
the bucket must still all-reduce it: they are the mean of the ranks' own), the
quantities the myths lab measures in `dpsim.labs.ch08_myths.myths_lab.ddp_facts_rank`. Checks
compare structure (equal to the mean within float32 rounding, counts and sizes exactly),
never a wall-clock time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.exercises.ch05 import torch_bucket_sizes
from dpsim.course.exercises.ch05_buckets import make_model
from dpsim.course.grading.ranks import join, run_specs
from dpsim.course.grading.registry import Case, exercise

# all-reduce sums in another order than one process: float32 gradients of size ~0.1 differ
# by ~1e-8; 1e-6 is far below any gap between one rank's gradient and the mean (> 1e-3)
GRAD_TOL = 1e-6


def batch(widths: list[int], rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s own batch of 4."""
    g = torch.Generator().manual_seed(500 + rank)
    return torch.randn(4, widths[0], generator=g), torch.randn(4, widths[-1], generator=g)


def _total(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def _local_grads(widths: list[int], seed: int, rank: int) -> torch.Tensor:
    model = make_model(widths, seed)
    x, y = batch(widths, rank)
    nn.functional.mse_loss(model(x), y).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _averaged(model: nn.Module, spec: dict[str, Any], world_size: int) -> bool:
    """Whether `model`'s gradients are the mean of every rank's own (what DDP leaves after
    a backward whose buckets were all-reduced and divided by the world size), or twice it
    (two backwards with no zero_grad between them: the measurement is right all the same)."""
    mean = torch.stack([_local_grads(spec["widths"], spec["seed"], r)
                        for r in range(world_size)]).mean(0)
    grads = [p.grad for p in model.parameters()]
    if any(g is None for g in grads):
        return False
    mine = torch.cat([g.detach().flatten() for g in grads if g is not None])
    return mine.shape == mean.shape and any(
        bool(torch.allclose(mine, k * mean, rtol=1e-4, atol=GRAD_TOL)) for k in (1, 2))


def _worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
            init_method: str, path: str) -> Any:
    """On a real rank: this rank's model (its own seed for 8.1) and batch, then `fn`; for
    8.3, whether the model's gradients after it are the mean of the ranks' (a comm hook that
    records the bucket must still all-reduce it)."""
    seed = spec["seed"] + (rank if spec["kind"] == "wrap" else 0)
    model = make_model(spec["widths"], seed)
    with join(rank, world_size, init_method):
        if spec["kind"] == "buckets":
            answer = fn(model, spec["bucket_cap_mb"], *batch(spec["widths"], rank))
            if isinstance(answer, dict):
                answer = {**answer, GRADS_KEY: _averaged(model, spec, world_size)}
            return answer
        if spec["kind"] == "grads":
            return fn(model, *batch(spec["widths"], rank))
        return fn(model)


def run_measure(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int) -> list[Any]:
    """What `fn` returned on every rank in case `index` (one launch serves every case)."""
    return run_specs(_worker, fn, specs)[index]


def _specs(rng: random.Random, kind: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"kind": kind, "world_size": ws, "seed": rng.randint(0, 999),
             "widths": [rng.randint(4, 24) for _ in range(rng.randint(3, 4))], **extra}
            for ws in (2, 3)]


@exercise("8.1", function="measure_wrap",
          title="Claim: every rank starts from its own initialisation under DDP", points=2)
def _wrap_cases(rng: random.Random) -> Iterator[Case]:
    specs = _specs(rng, "wrap")
    for index, spec in enumerate(specs):
        ws = spec["world_size"]
        own = [_total(make_model(spec["widths"], spec["seed"] + r)) for r in range(ws)]
        yield Case(f"{ws} gloo ranks, Linear widths {spec['widths']}, rank r initialised "
                   "with seed + r", args=(specs, index),
                   expected=[{"before": own[r], "after": own[0]} for r in range(ws)],
                   call=run_measure, rel_tol=1e-6, abs_tol=1e-6,
                   mistakes={
                       "you measured `after` on the module you passed in without wrapping "
                       "it in DDP first (DDP copies rank 0's parameters in its constructor)":
                           [{"before": o, "after": o} for o in own],
                       "you measured `before` after wrapping":
                           [{"before": own[0], "after": own[0]} for _ in range(ws)],
                   })


@exercise("8.2", function="measure_gradients",
          title="Claim: after backward, DDP's gradients are the mean of the ranks' own", points=2)
def _grad_cases(rng: random.Random) -> Iterator[Case]:
    specs = _specs(rng, "grads")
    for index, spec in enumerate(specs):
        ws = spec["world_size"]
        local = [_local_grads(spec["widths"], spec["seed"], r) for r in range(ws)]
        mean = torch.stack(local).mean(0)
        gaps = [float((mean - g).abs().max()) for g in local]
        yield Case(f"{ws} gloo ranks, Linear widths {spec['widths']}, each rank its own "
                   "batch of 4", args=(specs, index),
                   expected=[{"vs_mean": 0.0, "vs_local": gap} for gap in gaps],
                   call=run_measure, rel_tol=1e-4, abs_tol=GRAD_TOL,
                   mistakes={
                       "you compared with the sum of the local gradients, not their mean":
                           [{"vs_mean": float((mean * ws - g).abs().max()), "vs_local": gap}
                            for g, gap in zip(local, gaps, strict=True)],
                       "your local gradients are DDP's own (compute them on a copy of the "
                       "model made before wrapping, outside DDP)":
                           [{"vs_mean": 0.0, "vs_local": 0.0}] * ws,
                   })


def _bucket_spec(rng: random.Random, world_size: int) -> dict[str, Any]:
    """A model of 3 Linear layers and a cap that gives at least 3 buckets."""
    while True:
        spec: dict[str, Any] = {
                "kind": "buckets", "world_size": world_size, "seed": rng.randint(0, 999),
                "widths": [rng.randint(100, 300) for _ in range(4)],
                "bucket_cap_mb": round(rng.uniform(0.05, 0.15), 3)}
        model = make_model(spec["widths"], 0)
        if len(torch_bucket_sizes(model, spec["bucket_cap_mb"], spec["bucket_cap_mb"])) >= 3:
            return spec


GRADS_KEY = "gradients_after_are_the_mean"  # added to a dict answer of 8.3 by the check
NOT_REDUCED = ("after your function the model's gradients are not the mean of the ranks' own: "
               "a comm hook replaces DDP's all-reduce, so it must still all-reduce the bucket "
               "and divide by the world size (return allreduce_hook(state, bucket)); a hook "
               "that returns the local buffer leaves every rank its own gradients")
BYTES = ("you counted bytes (bucket.buffer().nbytes, or numel() * 4); the claim counts "
         "elements: bucket.buffer().numel()")


def _explain_buckets(answer: Any) -> str | None:
    """A hook that did not all-reduce, whatever sizes it recorded."""
    if isinstance(answer, list) and any(isinstance(r, dict) and r.get(GRADS_KEY) is False
                                        for r in answer):
        return f"looks like {NOT_REDUCED}"
    return None


@exercise("8.3", function="measure_buckets",
          title="Claim: DDP all-reduces the whole model in one message", points=2)
def _bucket_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_bucket_spec(rng, ws) for ws in (2, 3)]
    for index, spec in enumerate(specs):
        ws, cap = spec["world_size"], spec["bucket_cap_mb"]
        model = make_model(spec["widths"], spec["seed"])
        total = sum(p.numel() for p in model.parameters())
        second = [b // 4 for b in torch_bucket_sizes(model, cap, cap)]
        default = [b // 4 for b in torch_bucket_sizes(model, 25.0, 1.0)]

        def outcome(first: list[int], second: list[int], averaged: bool = True, ws: int = ws
                    ) -> list[dict[str, Any]]:
            return [{"first": first, "second": second, GRADS_KEY: averaged}] * ws

        yield Case(f"{ws} gloo ranks, Linear widths {spec['widths']} ({total} parameters), "
                   f"bucket_cap_mb={cap}", args=(specs, index),
                   expected=outcome([total], second),
                   call=run_measure, explain=_explain_buckets, mistakes={
                       "DDP's first backward uses one bucket for everything; it rebuilds "
                       "its buckets in the order the gradients arrived, for the second":
                           outcome(second, second),
                       "you did not pass bucket_cap_mb to DDP (its default is 25 MiB)":
                           outcome([total], default),
                       NOT_REDUCED: outcome([total], second, averaged=False),
                       BYTES: outcome([4 * total], [4 * b for b in second]),
                   })
