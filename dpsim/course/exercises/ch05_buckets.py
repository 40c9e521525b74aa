"""Exercise 5.5: DDP from scratch, with per-parameter hooks, buckets and async all-reduces.

The learner's `attach_buckets(model, bucket_cap_bytes, world_size)` registers
`register_post_accumulate_grad_hook`s that fill size-capped buckets (reverse parameter
order, closed once they hold at least the cap, the rest a last partial bucket), launches
each bucket's `dist.all_reduce(..., async_op=True)` as soon as it is full, and returns a
`finish()` that waits for every launch and leaves the average in p.grad. On real gloo
ranks the check counts the all-reduce calls (through a wrapper around
`torch.distributed.all_reduce`) and when each starts against the end of backward; the
reference is one process on the global batch and torch's own bucket assignment.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dpsim.course.grading.ranks import run_specs
from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.models import build_model

STEPS = 2  # two steps: the hooks must start over after finish()
LR = 0.1
# float32 parameters of size ~0.1 after two SGD steps; the ranks sum in another order than
# one process (~1e-7); every mistake below moves them by more than 1e-4
ABS_TOL = 1e-5


def make_model(widths: list[int], seed: int) -> nn.Module:
    """Linear layers with ReLUs between them (the model of exercises 5.5 and 8.x)."""
    return build_model("stack", seed=seed, widths=widths)


def batch(widths: list[int], seed: int, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch of 4 at `step`."""
    g = torch.Generator().manual_seed(10_000 * seed + 100 * step + rank)
    return torch.randn(4, widths[0], generator=g), torch.randn(4, widths[-1], generator=g)


def torch_buckets(model: nn.Module, cap_bytes: int) -> list[list[int]]:
    """Parameter indices of each bucket, from the assignment function DDP's reducer calls."""
    params = list(model.parameters())
    ready = list(range(len(params)))[::-1]
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in ready], [cap_bytes, cap_bytes], [False] * len(params), ready)
    return [[ready[i] for i in b] for b in buckets]


def reference_params(widths: list[int], seed: int, world_size: int, scale: float = 1.0
                     ) -> list[float]:
    """Parameters after STEPS SGD steps of one process on the global batch (all ranks')."""
    model = make_model(widths, seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(world_size):
            x, y = batch(widths, seed, r, step)
            (nn.functional.mse_loss(model(x), y) * scale / world_size).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def _bucket_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                   init_method: str, path: str) -> dict[str, Any]:
    """On a real rank: STEPS training steps with the learner's hooks; events in order."""
    from dpsim.course.grading.ranks import join

    model = make_model(spec["widths"], spec["seed"])
    events: list[str] = []
    original = dist.all_reduce

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        events.append("all_reduce")
        return original(*args, **kwargs)

    with join(rank, world_size, init_method):
        dist.all_reduce = counted
        try:
            finish = fn(model, spec["cap_bytes"], world_size)
            opt = torch.optim.SGD(model.parameters(), lr=LR)
            for step in range(STEPS):
                opt.zero_grad()
                x, y = batch(spec["widths"], spec["seed"], rank, step)
                nn.functional.mse_loss(model(x), y).backward()
                events.append("backward_end")
                finish()
                events.append("finished")
                opt.step()
        finally:
            dist.all_reduce = original
    return {"params": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
            "events": events}


def _per_step(events: list[str]) -> tuple[list[int], bool]:
    """All-reduce calls per step, and whether all but the last of each started in backward."""
    counts, overlap, in_backward, total = [], True, 0, 0
    for event in events:
        if event == "all_reduce":
            total += 1
        elif event == "backward_end":
            in_backward = total
        else:
            counts.append(total)
            overlap = overlap and in_backward >= total - 1
            in_backward = total = 0
    return counts, overlap


def run_buckets(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
                ) -> dict[str, Any]:
    """Case `index`: final parameters per rank, all-reduces per step, overlap with backward."""
    ranks = run_specs(_bucket_worker, fn, specs)[index]
    counts, overlap = _per_step(ranks[0]["events"])
    return {"params": [r["params"] for r in ranks], "all_reduces_per_step": counts,
            "all_but_last_launched_during_backward": overlap}


def _spec(rng: random.Random, world_size: int) -> dict[str, Any]:
    """Widths and a cap that give at least 3 buckets, the last one below the cap."""
    while True:
        widths = [rng.randint(8, 40) for _ in range(rng.randint(4, 5))]
        model = make_model(widths, 0)
        total = sum(p.numel() * 4 for p in model.parameters())
        cap = int(total * rng.uniform(0.15, 0.3))
        buckets = torch_buckets(model, cap)
        params = list(model.parameters())
        last = sum(params[i].numel() * 4 for i in buckets[-1])
        if len(buckets) >= 3 and last < cap:
            return {"world_size": world_size, "widths": widths, "cap_bytes": cap,
                    "seed": rng.randint(0, 999)}


@exercise("5.5", function="attach_buckets",
          title="DDP from scratch: hooks, buckets, async all-reduce", points=4)
def _bucket_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_spec(rng, 2), _spec(rng, 3)]
    for index, spec in enumerate(specs):
        ws, widths = spec["world_size"], spec["widths"]
        model = make_model(widths, spec["seed"])
        n_buckets = len(torch_buckets(model, spec["cap_bytes"]))
        n_params = len(list(model.parameters()))
        right = reference_params(widths, spec["seed"], ws)

        def outcome(params: list[float], calls: int, overlap: bool = True, ws: int = ws
                    ) -> dict[str, Any]:
            return {"params": [params] * ws, "all_reduces_per_step": [calls] * STEPS,
                    "all_but_last_launched_during_backward": overlap}

        label = (f"{ws} gloo ranks, Linear widths {widths}, bucket_cap_bytes="
                 f"{spec['cap_bytes']} ({n_params} parameters), {STEPS} steps")
        yield Case(label, args=(specs, index), expected=outcome(right, n_buckets),
                   call=run_buckets, abs_tol=ABS_TOL, mistakes={
                       "you all-reduced every parameter on its own instead of a bucket":
                           outcome(right, n_params),
                       "you launched the all-reduces only in finish(), after backward; "
                       "launch each bucket from the hook that fills it":
                           outcome(right, n_buckets, False),
                       "you summed but did not divide by world_size":
                           outcome(reference_params(widths, spec["seed"], ws, ws), n_buckets),
                       "you forgot the last partial bucket (it never reaches the cap)":
                           outcome(right, n_buckets - 1),
                   })
