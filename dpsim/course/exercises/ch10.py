"""Chapter 10 exercises: a checkpoint that resumes exactly, a resharding load, HSDP traffic.

Every right answer is computed here with torch itself (an uninterrupted training run;
`torch.chunk`, the split FSDP2 uses) or, for the traffic formula, with the FSDP paper's
formulas in `dpsim.sim.strategies.fsdp.hsdp` (which the learner may not call). Arguments are plain
data and tensors; answers are plain data.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import torch
from torch import nn

from dpsim.course.grading.registry import Case, exercise
from dpsim.sim.strategies.fsdp.hsdp import hsdp_traffic

# --- 10.1 a checkpoint that resumes exactly ------------------------------------------------


def _train(weights: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor, lr: float,
           plan: list[tuple[int, bool]]) -> dict[str, list[float]]:
    """Train a Linear layer with Adam on the (step, fresh optimizer) plan; plain answer."""
    model = nn.Linear(xs.shape[2], weights["weight"].shape[0])
    model.load_state_dict({k: v.clone() for k, v in weights.items()})
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step, fresh in plan:
        if fresh:
            opt = torch.optim.Adam(model.parameters(), lr=lr)
        opt.zero_grad()
        nn.functional.cross_entropy(model(xs[step]), ys[step]).backward()
        opt.step()
    return {k: v.detach().tolist() for k, v in model.state_dict().items()}


@exercise("10.1", function="resume_exactly",
          title="Save a checkpoint, lose everything, resume and end where an uninterrupted run "
                "ends", points=3)
def _resume_cases(rng: random.Random) -> Iterator[Case]:
    for steps, stop_at, n_in, n_out in ((6, 3, 5, 3), (5, 1, 4, 2),
                                        (rng.randint(5, 8), 4, rng.randint(3, 6), 4)):
        weights = {"weight": torch.randn(n_out, n_in), "bias": torch.randn(n_out)}
        xs = torch.randn(steps, 4, n_in)
        ys = torch.randint(0, n_out, (steps, 4))
        lr = rng.choice([1e-2, 5e-2])
        straight = [(s, False) for s in range(steps)]
        right = _train(weights, xs, ys, lr, straight)
        fresh_opt = [(s, s == stop_at) for s in range(steps)]
        again = [(s, False) for s in range(stop_at)] + [(s, False) for s in range(steps)]
        skipped = [(s, False) for s in range(steps) if s != stop_at]
        yield Case(f"{steps} steps of Adam(lr={lr}) on Linear({n_in}, {n_out}), interrupted "
                   f"after {stop_at} steps", args=(weights, xs, ys, lr, stop_at),
                   expected=right, rel_tol=1e-6, abs_tol=1e-7, mistakes={
                       "the optimizer state was not saved or not loaded (Adam started again "
                       "from zero moments)": _train(weights, xs, ys, lr, fresh_opt),
                       "training restarted at step 0 instead of at the step after the "
                       "checkpoint": _train(weights, xs, ys, lr, again),
                       "one step was skipped after resuming (off by one)":
                           _train(weights, xs, ys, lr, skipped),
                       "nothing was loaded: the fresh model trained from its own initial "
                       "values": None,
                   })


# --- 10.2 a resharding load ----------------------------------------------------------------


def fsdp_chunks(t: torch.Tensor, world_size: int) -> list[torch.Tensor]:
    """Rank r's dim-0 rows of `t` under FSDP2: torch.chunk, empty for ranks past the last
    chunk."""
    chunks = list(torch.chunk(t, world_size, dim=0))
    return chunks + [t[:0]] * (world_size - len(chunks))


@exercise("10.2", function="reshard_rows",
          title="Load shards saved at one world size into the shards of another", points=2,
          forbidden=("dpsim.sim.cost.fsdp_shards.fsdp_shard_rows",
                     "dpsim.sim.cost.fsdp_shards.fsdp_shard_numel"))
def _reshard_cases(rng: random.Random) -> Iterator[Case]:
    for rows, old, new in ((10, 4, 3), (5, 4, 2), (5, 2, 4), (7, 3, 3),
                           (rng.randint(9, 20), 4, rng.choice([2, 3, 5]))):
        t = torch.randn(rows, 3)
        saved = fsdp_chunks(t, old)
        right = [c.tolist() for c in fsdp_chunks(t, new)]
        sizes = [len(a) for a in torch.tensor_split(torch.arange(rows), new)]
        even, starts = [], 0
        for size in sizes:
            even.append(t[starts:starts + size].tolist())
            starts += size
        yield Case(f"a [{rows}, 3] parameter saved on {old} ranks "
                   f"(rows {[len(s) for s in saved]}), loaded on {new}",
                   args=([s.clone() for s in saved], new), expected=right, mistakes={
                       "FSDP2 splits dim 0 with torch.chunk (ceil(rows / world_size) rows per "
                       "rank, the last ranks get fewer or none), not evenly like "
                       "tensor_split": even,
                       "you kept the old shards (resharding must regroup the rows)":
                           [s.tolist() for s in saved],
                   })


# --- 10.3 HSDP traffic per mesh dimension --------------------------------------------------


@exercise("10.3", function="hsdp_bytes_sent",
          title="Bytes one device sends per step along each mesh dimension of HSDP", points=2,
          forbidden=("dpsim.sim.strategies.fsdp.hsdp.hsdp_traffic",
                     "dpsim.sim.strategies.fsdp.hsdp.traffic_of"))
def _traffic_cases(rng: random.Random) -> Iterator[Case]:
    for world, shard in ((16, 8), (16, 16), (16, 1), (64, 8), (rng.choice([32, 128]), 4)):
        n_params = shard * rng.randint(10**5, 10**7)  # a multiple of the shard size
        t = hsdp_traffic(n_params, world, shard, 2)
        m = 2 * n_params
        r = world // shard
        yield Case(f"n_params={n_params:,} (bf16), world_size={world}, shard_size={shard}",
                   args=(n_params, world, shard, 2),
                   expected={"shard": t.shard_bytes, "replicate": t.replicate_bytes},
                   mistakes={
                       "the all-reduce across replicas moves the gradient shard (1/F of the "
                       "model), not the whole model": {
                           "shard": t.shard_bytes, "replicate": 2 * m * (r - 1) // r},
                       "FSDP all-gathers twice (forward and backward) and reduce-scatters "
                       "once: 3 transfers of (F-1)/F of the model": {
                           "shard": 2 * m * (shard - 1) // shard,
                           "replicate": t.replicate_bytes},
                   })
