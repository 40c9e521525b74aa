"""Exercise 6.5: a ZeRO-1 optimizer by hand, on 2 and 3 real gloo ranks.

The learner's `make_zero1(params, rank, world_size, lr)` partitions the parameters the way
`torch.distributed.optim.ZeroRedundancyOptimizer` does (largest first, each to the rank
holding the fewest elements so far), builds an Adam over its own part only, and returns a
`step()` that steps that part and then broadcasts every parameter from its owner. The check
averages the gradients (as DDP would), calls `step()` for a few steps, and measures the
Adam state each rank holds (the optimizers the learner builds are recorded). The reference
is one process with Adam on the global batch; the bytes per rank follow torch's partition
rule (a slow test runs ZeroRedundancyOptimizer itself and compares both).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.grading.compare import same
from dpsim.course.grading.ranks import join, run_specs
from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.models import build_model
from dpsim.sim import zero1_partition

STEPS = 3
LR = 0.01
# float32 Adam over 3 steps: the ranks average gradients in another order than one process
# (~1e-7 relative); Adam's update is at most lr = 0.01 a step, so 1e-5 is far below a
# missing or doubled step and far above rounding
ABS_TOL = 1e-5
ADAM_STATE_BYTES = 8  # exp_avg + exp_avg_sq, fp32, per element (the 0-dim step not counted)


def make_model(widths: list[int], seed: int) -> nn.Module:
    """Linear layers with Tanh between them (the model of exercise 6.5)."""
    return build_model("stack", seed=seed, widths=widths, activation="tanh")


def batch(widths: list[int], seed: int, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch of 4 at `step`."""
    g = torch.Generator().manual_seed(7919 * seed + 100 * step + rank)
    return torch.randn(4, widths[0], generator=g), torch.randn(4, widths[-1], generator=g)


def reference_params(widths: list[int], seed: int, world_size: int) -> list[float]:
    """Parameters after STEPS Adam steps of one process on the global batch."""
    model = make_model(widths, seed)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        for r in range(world_size):
            x, y = batch(widths, seed, r, step)
            (nn.functional.mse_loss(model(x), y) / world_size).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of an optimizer's state tensors (0-dim counters such as Adam's step left out)."""
    return sum(t.numel() * t.element_size() for state in optimizer.state.values()
               for t in state.values() if torch.is_tensor(t) and t.dim() > 0)


def _zero_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                 init_method: str, path: str) -> dict[str, Any]:
    """On a real rank: STEPS steps with averaged gradients and the learner's step()."""
    import torch.distributed as dist

    model = make_model(spec["widths"], spec["seed"])
    built: list[torch.optim.Optimizer] = []
    original = torch.optim.Optimizer.__init__

    def recorded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        built.append(self)

    with join(rank, world_size, init_method):
        torch.optim.Optimizer.__init__ = recorded  # type: ignore[method-assign]
        try:
            step = fn(list(model.parameters()), rank, world_size, LR)
        finally:
            torch.optim.Optimizer.__init__ = original  # type: ignore[method-assign]
        for i in range(STEPS):
            model.zero_grad()
            x, y = batch(spec["widths"], spec["seed"], rank, i)
            nn.functional.mse_loss(model(x), y).backward()
            for p in model.parameters():  # what DDP leaves: the average over the ranks
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world_size
            step()
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return {"params": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist(),
            "state_bytes": sum(state_bytes(o) for o in built
                               if not isinstance(o, ZeroRedundancyOptimizer)),
            "zero_redundancy": any(isinstance(o, ZeroRedundancyOptimizer) for o in built)}


def run_zero1(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
              ) -> dict[str, Any]:
    """Case `index`: parameters and optimizer-state bytes on every rank."""
    ranks = run_specs(_zero_worker, fn, specs)[index]
    return {"params": [r["params"] for r in ranks],
            "optimizer_state_bytes": [r["state_bytes"] for r in ranks],
            "built_zero_redundancy_optimizer": [r["zero_redundancy"] for r in ranks]}


LIBRARY = ("this exercise asks you to write ZeRO-1 yourself, not to use torch's "
           "ZeroRedundancyOptimizer: partition the parameters and build a plain Adam over "
           "this rank's part")


NO_BROADCAST = ("the ranks end with different parameters: after its own Adam step each "
                "rank must send the parameters it owns to every other rank (dist.broadcast(p, "
                "src=owner) for every parameter), or each keeps stale copies of the rest")
TIES = ("when several ranks hold equally few elements, ZeroRedundancyOptimizer gives the "
        "parameter to the first of them, the lowest rank (sizes.index(min(sizes)))")


def _explain_zero(answer: Any) -> str | None:
    """The library's own optimizer, whatever the numbers it gives; parameters that differ
    between ranks (no broadcast), whatever they are."""
    if not isinstance(answer, dict):
        return None
    if any(answer.get("built_zero_redundancy_optimizer") or []):
        return LIBRARY
    params = answer.get("params")
    if isinstance(params, list) and len(params) > 1 and isinstance(params[0], list) and any(
            not same(other, params[0], 0.0, ABS_TOL) for other in params[1:]):
        return f"looks like {NO_BROADCAST}"
    return None


def no_broadcast_params(widths: list[int], seed: int, owned: list[list[int]]
                        ) -> list[list[float]]:
    """Every rank's parameters after STEPS steps when each steps its own part and sends
    nothing (one process plays the ranks: their gradients averaged, as the check does)."""
    world_size = len(owned)
    models = [make_model(widths, seed) for _ in range(world_size)]
    opts = [torch.optim.Adam([p for i, p in enumerate(m.parameters()) if i in owned[r]],
                             lr=LR) if owned[r] else None for r, m in enumerate(models)]
    for step in range(STEPS):
        for r, m in enumerate(models):
            m.zero_grad()
            x, y = batch(widths, seed, r, step)
            nn.functional.mse_loss(m(x), y).backward()
        for params in zip(*(list(m.parameters()) for m in models), strict=True):
            mean = torch.stack([p.grad for p in params]).sum(0) / world_size
            for p in params:
                p.grad = mean.clone()
        for opt in opts:
            if opt is not None:
                opt.step()
    return [torch.cat([p.detach().flatten() for p in m.parameters()]).tolist() for m in models]


@exercise("6.5", function="make_zero1", title="ZeRO-1 by hand: shard the optimizer state",
          points=4)
def _zero_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_zero_spec(rng, ws) for ws in (2, 3)]
    for index, spec in enumerate(specs):
        ws, widths = spec["world_size"], spec["widths"]
        numels = [p.numel() for p in make_model(widths, 0).parameters()]
        right = reference_params(widths, spec["seed"], ws)

        def per_rank(owned: list[list[int]], numels: list[int] = numels) -> list[int]:
            return [ADAM_STATE_BYTES * sum(numels[i] for i in part) for part in owned]

        def outcome(bytes_: list[int], ws: int = ws, right: list[float] = right,
                    params: list[list[float]] | None = None) -> dict[str, Any]:
            return {"params": params or [right] * ws, "optimizer_state_bytes": bytes_,
                    "built_zero_redundancy_optimizer": [False] * ws}

        owned = zero1_partition(numels, ws)

        label = (f"{ws} gloo ranks, Linear widths {widths} (parameter sizes {numels}), "
                 f"Adam lr={LR}, {STEPS} steps")
        yield Case(label, args=(specs, index),
                   expected=outcome(per_rank(zero1_partition(numels, ws))),
                   call=run_zero1, abs_tol=ABS_TOL, explain=_explain_zero, mistakes={
                       "every rank keeps Adam state for every parameter: build the "
                       "optimizer over this rank's own parameters only":
                           outcome([ADAM_STATE_BYTES * sum(numels)] * ws),
                       "you dealt the parameters round-robin; ZeroRedundancyOptimizer gives "
                       "the largest first, each to the rank with the fewest elements so far":
                           outcome(per_rank([list(range(r, len(numels), ws))
                                             for r in range(ws)])),
                       "you gave the parameters in their own order to the least-loaded rank; "
                       "sort them largest first": outcome(per_rank(_unsorted(numels, ws))),
                       TIES: outcome(per_rank(_partition(numels, ws, last_of_ties=True))),
                       NO_BROADCAST: outcome(per_rank(owned), params=no_broadcast_params(
                           widths, spec["seed"], owned)),
                   })


def _zero_spec(rng: random.Random, world_size: int) -> dict[str, Any]:
    """Widths whose partition differs from a round-robin one and from an unsorted one, so
    both mistakes show for every student."""
    while True:
        widths = [rng.randint(3, 24) for _ in range(rng.randint(3, 4))]
        spec: dict[str, Any] = {"world_size": world_size, "seed": rng.randint(0, 999),
                                "widths": widths}
        numels = [p.numel() for p in make_model(widths, 0).parameters()]

        def loads(owned: list[list[int]], numels: list[int] = numels) -> list[int]:
            return [sum(numels[i] for i in part) for part in owned]

        right = loads(zero1_partition(numels, world_size))
        robin = loads([list(range(r, len(numels), world_size)) for r in range(world_size)])
        if right not in (robin, loads(_unsorted(numels, world_size)),
                         loads(_partition(numels, world_size, last_of_ties=True))):
            return spec


def _partition(numels: list[int], world_size: int, last_of_ties: bool = False
               ) -> list[list[int]]:
    """torch's partition (largest first, to the least-loaded rank); `last_of_ties` (a
    slip): a tie between ranks goes to the last of them."""
    owned: list[list[int]] = [[] for _ in range(world_size)]
    sizes = [0] * world_size
    for i in sorted(range(len(numels)), key=lambda k: numels[k], reverse=True):
        least = min(sizes)
        r = max(q for q in range(world_size) if sizes[q] == least) if last_of_ties \
            else sizes.index(least)
        owned[r].append(i)
        sizes[r] += numels[i]
    return owned


def _unsorted(numels: list[int], world_size: int) -> list[list[int]]:
    owned: list[list[int]] = [[] for _ in range(world_size)]
    sizes = [0] * world_size
    for i, n in enumerate(numels):
        r = sizes.index(min(sizes))
        owned[r].append(i)
        sizes[r] += n
    return owned
