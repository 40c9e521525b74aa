"""Exercise 6.6: FSDP2 training with clipping and a sharded checkpoint, on 2 and 3 real ranks.

The learner's `fsdp2_train(rank, world_size, data, config, checkpoint_dir)` runs inside the
process group: it wraps each Linear with `fully_shard` and then the root (with a
`MixedPrecisionPolicy`), trains with Adam and `clip_grad_norm_` on the DTensor parameters,
saves model and optimizer with `torch.distributed.checkpoint`, builds everything afresh,
loads the checkpoint and trains on. The reference is one process that trains the same
model on the global batch without stopping; the checkpoint directory is read back to see
that every rank wrote its own shards. While the learner's function runs, a forward hook on
every module (torch's global one) records the largest batch a rank's forward saw (its own
shard of the batch, not the global batch: both give the same gradients, so only this tells
them apart) and whether every Linear that ran was a `fully_shard`ed module (root only: the
same numbers too).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.grading.ranks import join, run_specs
from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.models import build_model

# float32 throughout (the policy keeps fp32 here so the comparison is exact up to the
# order of sums, ~1e-7); every mistake below moves some parameter by more than 1e-3
ABS_TOL = 1e-5


def make_model(in_features: int, hidden: int, seed: int) -> nn.Module:
    """The model of exercise 6.6: three Linear layers with Tanh between them."""
    return build_model("stack", seed=seed, widths=[in_features, hidden, hidden, 1],
                       activation="tanh")


def reference_training(data: dict[str, list[list[float]]], config: dict[str, Any], *,
                       clip: str = "global", resume: str = "all", world_size: int = 1,
                       zero_grad: bool = True) -> dict[str, list[float]]:
    """One process, the global batch, no stop. clip: "global" (torch's clip_grad_norm_),
    "none", or "local" (each of `world_size` ranks clips its dim-0 shards by their own norm);
    resume: "all", "no_optimizer" (Adam restarts at the checkpoint), "primed_optimizer" (so
    does Adam, after the step of zero gradients at lr 0 that torch's get_state_dict gives
    an optimizer with no state), "nothing" (training restarts from the initial model);
    zero_grad=False (a slip): the gradients add up, from
    the start and from the new model built after the checkpoint."""
    x, y = torch.tensor(data["x"]), torch.tensor(data["y"])
    model = make_model(x.shape[1], config["hidden"], config["seed"])
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
    for step in range(config["steps_before"] + config["steps_after"]):
        if step == config["steps_before"] and resume != "all":
            if resume == "nothing":
                model = make_model(x.shape[1], config["hidden"], config["seed"])
            opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
            if resume == "primed_optimizer":
                _prime(opt)
        if zero_grad or step in (0, config["steps_before"]):
            opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if clip == "global":
            torch.nn.utils.clip_grad_norm_(model.parameters(), config["max_norm"])
        elif clip == "local":
            _clip_shards_locally(list(model.parameters()), config["max_norm"], world_size)
        opt.step()
    return {k: v.flatten().tolist() for k, v in model.state_dict().items()}


def _prime(opt: torch.optim.Optimizer) -> None:
    """What torch.distributed.checkpoint.state_dict's _init_optim_state does to an optimizer
    with no state: one step of zero gradients at lr 0 (Adam's step count becomes 1)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.zeros_like(p)
    lrs = [group["lr"] for group in opt.param_groups]
    for group in opt.param_groups:
        group["lr"] = 0.0
    opt.step()
    for group, lr in zip(opt.param_groups, lrs, strict=True):
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)


def _clip_shards_locally(params: list[nn.Parameter], max_norm: float, world_size: int
                         ) -> None:
    """Each rank scales its FSDP2 shards (torch.chunk of dim 0) by max_norm over the norm
    of its own shards only, as clip_grad_norm_ on `.to_local()` gradients would."""
    grads = [p.grad for p in params if p.grad is not None]
    shards = [list(torch.chunk(g, world_size, dim=0)) for g in grads]
    for rank in range(world_size):
        mine = [s[rank] for s in shards if rank < len(s)]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t)
                                                     for t in mine])) if mine else 0.0
        coef = torch.clamp(max_norm / (torch.as_tensor(norm) + 1e-6), max=1.0)
        for t in mine:
            t.mul_(coef)  # chunks are views: the full gradient changes


def _chunks(checkpoint_dir: str) -> int | str:
    """How many pieces the first Linear's weight was saved in (1: not sharded)."""
    import torch.distributed.checkpoint as dcp

    try:
        meta = dcp.FileSystemReader(checkpoint_dir).read_metadata().state_dict_metadata
    except Exception as exc:  # no checkpoint, or not a DCP one
        return f"no torch.distributed.checkpoint in checkpoint_dir ({type(exc).__name__})"
    keys = [k for k in meta if k.endswith("0.weight") and "state" not in k]
    return len(getattr(meta[keys[0]], "chunks", [])) if keys else "no model weights saved"


@contextlib.contextmanager
def _watching_forwards(seen: dict[str, Any]) -> Iterator[None]:
    """Record, for every module forward while inside: the largest leading dimension of its
    first tensor input ("rows"), and whether every nn.Linear that ran was an FSDPModule."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.modules.module import register_module_forward_pre_hook

    def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
        first = next((a for a in args if torch.is_tensor(a)), None)
        if first is not None and first.dim() > 0:
            seen["rows"] = max(seen["rows"], int(first.shape[0]))
        if isinstance(module, nn.Linear) and not isinstance(module, FSDPModule):
            seen["every_linear_sharded"] = False

    handle = register_module_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _fsdp2_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                  init_method: str, path: str) -> dict[str, Any]:
    """On a real rank: the learner's training; its parameters; the batch its forwards saw
    and whether its Linears were sharded; the checkpoint's layout."""
    import torch.distributed as dist

    checkpoint_dir = path + "_checkpoint"
    seen: dict[str, Any] = {"rows": 0, "every_linear_sharded": True}
    with join(rank, world_size, init_method):
        with _watching_forwards(seen):
            params = fn(rank, world_size, spec["data"], spec["config"], checkpoint_dir)
        dist.barrier()
        out: dict[str, Any] = {"params": params if not isinstance(params, dict) else {
            str(k): (v.flatten().tolist() if torch.is_tensor(v) else v)
            for k, v in params.items()}, **seen}
        if rank == 0:
            out["chunks"] = _chunks(checkpoint_dir)
            out["files"] = sorted(f for f in os.listdir(checkpoint_dir) if f.endswith(".distcp")
                                  ) if os.path.isdir(checkpoint_dir) else []
    return out


def run_fsdp2(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
              ) -> dict[str, Any]:
    """Case `index`: every rank's full parameters, the saved weight's pieces, writer ranks,
    the largest batch each rank's forwards saw, whether each rank's Linears were sharded."""
    ranks = run_specs(_fsdp2_worker, fn, specs)[index]
    return {"params": [r["params"] for r in ranks], "weight_saved_in_pieces": ranks[0]["chunks"],
            "ranks_that_wrote_shards": len(ranks[0]["files"]),
            "rows_per_forward": [r["rows"] for r in ranks],
            "every_linear_sharded": [r["every_linear_sharded"] for r in ranks]}


WHOLE_BATCH = ("every rank trained on the whole global batch: rank r takes only its own "
               "rows, x[r * b:(r + 1) * b] with b = len(x) // world_size (the gradients "
               "come out the same, the work does not shrink)")
ROOT_ONLY = ("not every Linear was sharded on its own: call fully_shard on each Linear, "
             "then on the root (the root alone gathers the whole model at once)")
LOCAL_NORM = ("you clipped by each rank's local norm (of its own shards, .to_local()); "
              "call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) on the "
              "DTensor parameters: it clips by the global norm over all ranks")


def _explain(rows: int, answer: Any) -> str | None:
    """The batch and sharding mistakes, from the answer's own fields (the parameters come
    out right with either)."""
    if not isinstance(answer, dict):
        return None
    seen = answer.get("rows_per_forward")
    if isinstance(seen, list) and any(isinstance(r, int) and r > rows for r in seen):
        return WHOLE_BATCH
    sharded = answer.get("every_linear_sharded")
    if isinstance(sharded, list) and False in sharded:
        return ROOT_ONLY
    return None


def _spec(rng: random.Random, world_size: int) -> dict[str, Any]:
    b, d = rng.choice([2, 3]), rng.randint(3, 6)
    g = torch.Generator().manual_seed(rng.randint(0, 10**6))
    x = torch.randn(world_size * b, d, generator=g)
    y = x.sum(1, keepdim=True).sin()
    config = {"hidden": rng.choice([5, 7, 8]), "seed": rng.randint(0, 999), "lr": 0.05,
              "max_norm": round(rng.uniform(0.2, 0.5), 2), "steps_before": 2,
              "steps_after": 2}
    return {"world_size": world_size, "data": {"x": x.tolist(), "y": y.tolist()},
            "config": config}


@exercise("6.6", function="fsdp2_train",
          title="FSDP2: shard, clip, save a sharded checkpoint, resume", points=4)
def _fsdp2_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_spec(rng, 2), _spec(rng, 3)]
    for index, spec in enumerate(specs):
        ws, config, data = spec["world_size"], spec["config"], spec["data"]
        rows = len(data["x"]) // ws

        def outcome(params: dict[str, list[float]], ws: int = ws, rows: int = rows,
                    sharded: bool = True) -> dict[str, Any]:
            return {"params": [params] * ws, "weight_saved_in_pieces": ws,
                    "ranks_that_wrote_shards": ws, "rows_per_forward": [rows] * ws,
                    "every_linear_sharded": [sharded] * ws}

        right = reference_training(data, config)
        label = (f"{ws} gloo ranks, {len(data['x'])} samples, hidden="
                 f"{config['hidden']}, max_norm={config['max_norm']}, "
                 f"{config['steps_before']} steps, checkpoint, {config['steps_after']} steps")
        yield Case(label, args=(specs, index), expected=outcome(right),
                   call=run_fsdp2, abs_tol=ABS_TOL, explain=functools.partial(_explain, rows),
                   mistakes={
                       WHOLE_BATCH: outcome(right, rows=ws * rows),
                       ROOT_ONLY: outcome(right, sharded=False),
                       "you did not clip the gradients (clip_grad_norm_ works on the "
                       "sharded DTensor gradients)":
                           outcome(reference_training(data, config, clip="none")),
                       LOCAL_NORM: outcome(reference_training(data, config, clip="local",
                                                              world_size=ws)),
                       "the optimizer state was not restored: save and load it with the "
                       "model (get_state_dict / set_state_dict)":
                           outcome(reference_training(data, config, resume="no_optimizer")),
                       "the optimizer state was not restored: only the model went into the "
                       "checkpoint (get_state_dict gave the new Adam one step of zero "
                       "gradients, and nothing replaced it); save and load the optimizer "
                       "with the model": outcome(reference_training(
                           data, config, resume="primed_optimizer")),
                       "the gradients were never zeroed: call optimizer.zero_grad() before "
                       "every backward (backward adds into p.grad, sharded or not)":
                           outcome(reference_training(data, config, zero_grad=False)),
                       "the loaded checkpoint never reached the model: training restarted "
                       "from the initial parameters":
                           outcome(reference_training(data, config, resume="nothing")),
                   })
