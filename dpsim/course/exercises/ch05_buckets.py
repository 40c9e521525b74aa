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

import functools
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
    """Parameter indices of each bucket, from the assignment function DDP's reducer calls
    (given the indices in ready order, it answers in those indices)."""
    params = list(model.parameters())
    ready = list(range(len(params)))[::-1]
    buckets, _ = dist._compute_bucket_assignment_by_size(
        [params[i] for i in ready], [cap_bytes, cap_bytes], [False] * len(params), ready)
    return [list(b) for b in buckets]


def walk_buckets(sizes: list[int], cap_bytes: int, strict: bool = False) -> list[list[int]]:
    """Indices into `sizes` (bytes, in ready order) of each bucket: closed once it holds at
    least the cap (`strict`: only once it exceeds it, the `>` mistake)."""
    buckets: list[list[int]] = [[]]
    held = 0
    for i, size in enumerate(sizes):
        buckets[-1].append(i)
        held += size
        if held > cap_bytes or (held == cap_bytes and not strict):
            buckets.append([])
            held = 0
    return [b for b in buckets if b]


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


class _Watched:
    """A work handle whose wait() is recorded (delegates everything else)."""

    def __init__(self, work: Any, events: list[str]) -> None:
        self._work, self._events = work, events

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        self._events.append("wait")
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _bucket_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                   init_method: str, path: str) -> dict[str, Any]:
    """On a real rank: STEPS training steps with the learner's hooks; events in order
    (`all_reduce:<numel>:<async 0/1>`, `wait`, `backward_end`, `finished`)."""
    from dpsim.course.grading.ranks import join

    model = make_model(spec["widths"], spec["seed"])
    events: list[str] = []
    original = dist.all_reduce

    def counted(tensor, *args, **kwargs):  # type: ignore[no-untyped-def]
        is_async = kwargs.get("async_op", args[2] if len(args) > 2 else False)
        events.append(f"all_reduce:{tensor.numel()}:{int(bool(is_async))}")
        work = original(tensor, *args, **kwargs)
        return _Watched(work, events) if work is not None else None

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


def per_step(events: list[str]) -> dict[str, Any]:
    """From a rank's events: each step's all-reduce sizes (elements, sorted), whether all
    but the last launch of every step came before backward() returned, and whether every
    launch was asynchronous with no wait() before backward() returned."""
    sizes: list[list[int]] = []
    overlap, asynchronous = True, True
    step: list[int] = []
    in_backward, backward_over = 0, False
    for event in events:
        if event.startswith("all_reduce:"):
            _, numel, is_async = event.split(":")
            step.append(int(numel))
            asynchronous = asynchronous and is_async == "1"
        elif event == "wait":
            asynchronous = asynchronous and backward_over
        elif event == "backward_end":
            in_backward, backward_over = len(step), True
        elif event == "finished":
            sizes.append(sorted(step))
            overlap = overlap and in_backward >= len(step) - 1
            step, in_backward, backward_over = [], 0, False
    return {"all_reduce_numels_per_step": sizes,
            "all_but_last_launched_during_backward": overlap,
            "async_with_no_wait_during_backward": asynchronous}


def run_buckets(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
                ) -> dict[str, Any]:
    """Case `index`: final parameters per rank, all-reduce sizes per step, overlap."""
    ranks = run_specs(_bucket_worker, fn, specs)[index]
    return {"params": [r["params"] for r in ranks], **per_step(ranks[0]["events"])}


def _spec(rng: random.Random, world_size: int, exact: bool) -> dict[str, Any]:
    """Widths and a cap that give at least 3 buckets, the last one below the cap; `exact`:
    the first bucket holds exactly the cap (closing on `>` instead of `>=` shows)."""
    while True:
        widths = [rng.randint(8, 40) for _ in range(rng.randint(4, 5))]
        model = make_model(widths, 0)
        sizes = [p.numel() * 4 for p in model.parameters()][::-1]
        total = sum(sizes)
        cap = int(total * rng.uniform(0.15, 0.3))
        if exact:
            prefix = [sum(sizes[:k]) for k in range(1, len(sizes))]
            fits = [c for c in prefix if 0.1 * total <= c <= 0.35 * total]
            if not fits:
                continue
            cap = rng.choice(fits)
        buckets = torch_buckets(model, cap)
        params = list(model.parameters())
        last = sum(params[i].numel() * 4 for i in buckets[-1])
        forward = walk_buckets(sizes[::-1], cap)  # buckets filled in forward order: they show
        if len(buckets) >= 3 and last < cap and _sizes(forward, sizes[::-1]) != _sizes(
                walk_buckets(sizes, cap), sizes):
            return {"world_size": world_size, "widths": widths, "cap_bytes": cap,
                    "seed": rng.randint(0, 999)}


def _sizes(buckets: list[list[int]], sizes: list[int]) -> list[int]:
    """Each bucket's total of `sizes`, sorted (the check compares sorted all-reduce sizes)."""
    return sorted(sum(sizes[i] for i in b) for b in buckets)


@exercise("5.5", function="attach_buckets",
          title="DDP from scratch: hooks, buckets, async all-reduce", points=4)
def _bucket_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_spec(rng, 2, exact=True), _spec(rng, 3, exact=False)]
    for index, spec in enumerate(specs):
        ws, widths = spec["world_size"], spec["widths"]
        model = make_model(widths, spec["seed"])
        params = list(model.parameters())
        numels = [params[i].numel() for i in range(len(params))][::-1]
        buckets = walk_buckets([4 * n for n in numels], spec["cap_bytes"])
        assert [[len(params) - 1 - i for i in b] for b in buckets] == torch_buckets(
            model, spec["cap_bytes"]), "the walk disagrees with DDP's bucket assignment"
        strict = walk_buckets([4 * n for n in numels], spec["cap_bytes"], strict=True)
        forward = [[len(numels) - 1 - i for i in b]  # filled walking model.parameters()
                   for b in walk_buckets([4 * n for n in numels[::-1]], spec["cap_bytes"])]
        right = reference_params(widths, spec["seed"], ws)

        def outcome(params: list[float], buckets: list[list[int]], overlap: bool = True,
                    asynchronous: bool = True, ws: int = ws, numels: list[int] = numels
                    ) -> dict[str, Any]:
            sizes = sorted(sum(numels[i] for i in b) for b in buckets)
            return {"params": [params] * ws, "all_reduce_numels_per_step": [sizes] * STEPS,
                    "all_but_last_launched_during_backward": overlap,
                    "async_with_no_wait_during_backward": asynchronous}

        label = (f"{ws} gloo ranks, Linear widths {widths}, bucket_cap_bytes="
                 f"{spec['cap_bytes']} ({len(params)} parameters), {STEPS} steps")
        sizes = outcome(right, buckets)["all_reduce_numels_per_step"]
        structure = [
            (outcome(right, [[i] for i in range(len(numels))]), PER_PARAMETER),
            (outcome(right, buckets[:-1]), NO_PARTIAL),
            (outcome(right, strict) if strict != buckets else None, STRICT),
            (outcome(right, forward), FORWARD),
        ]
        no_reset = dict(outcome(right, buckets), all_reduce_numels_per_step=[sizes[0], []])
        yield Case(label, args=(specs, index), expected=outcome(right, buckets),
                   call=run_buckets, abs_tol=ABS_TOL,
                   explain=functools.partial(_explain, sizes=sizes, structure=structure),
                   mistakes={
                       PER_PARAMETER: structure[0][0],
                       LATE: outcome(right, buckets, False),
                       SYNCHRONOUS: outcome(right, buckets, True, False),
                       "you summed but did not divide by world_size":
                           outcome(reference_params(widths, spec["seed"], ws, ws), buckets),
                       NO_PARTIAL: structure[1][0],
                       STRICT: structure[2][0],
                       FORWARD: structure[3][0],
                       NO_RESET: no_reset,
                   })


PER_PARAMETER = "you all-reduced every parameter on its own instead of a bucket"
LATE = ("you launched the all-reduces only in finish(), after backward; launch each bucket "
        "from the hook that fills it")
SYNCHRONOUS = ("your all-reduces do not overlap backward: call dist.all_reduce(flat, "
               "async_op=True) in the hook and wait() on its handle only in finish()")
NO_PARTIAL = "you forgot the last partial bucket (it never reaches the cap)"
STRICT = ("you closed a bucket only once it exceeded the cap; close it as soon as it holds "
          "at least bucket_cap_bytes (>=)")
FORWARD = ("you filled the buckets walking the parameters forward; gradients arrive in "
           "reverse order, so DDP fills its buckets from the last parameter back "
           "(reversed(list(model.parameters())))")
NO_RESET = ("the first step's all-reduces are right but the second step's are not: finish() "
            "must start every bucket over (its count of ready gradients, its pending "
            "all-reduces), or the hooks of the next step find the buckets still full")


def _explain(answer: Any, *, sizes: list[list[int]],
             structure: list[tuple[dict[str, Any] | None, str]]) -> str | None:
    """The hint from the answer's structure alone (bucket sizes, overlap), whatever its
    parameters: a missing bucket also leaves the parameters wrong, in a way not worth
    predicting."""
    if not isinstance(answer, dict):
        return None
    got = answer.get("all_reduce_numels_per_step")
    if (isinstance(got, list) and len(got) == len(sizes) > 1 and got[0] == sizes[0]
            and got[1:] != sizes[1:]):
        return f"looks like {NO_RESET}"
    if got != sizes:
        for wrong, words in structure:
            if wrong is not None and got == wrong["all_reduce_numels_per_step"]:
                return f"looks like {words}"
    if answer.get("all_but_last_launched_during_backward") is False:
        return f"looks like {LATE}"
    if answer.get("async_with_no_wait_during_backward") is False:
        return f"looks like {SYNCHRONOUS}"
    return None
