"""Exercise 5.4: a complete DDP training function, run on 2 and 3 real gloo ranks.

The learner's `train_ddp(rank, world_size, init_method, data, config, checkpoint_path)`
joins the process group itself, trains with `DistributedSampler` + `set_epoch`, gradient
accumulation under `no_sync`, saves a rank-0 checkpoint behind a barrier and loads it back.
The reference is one process on the global batch (torch's own DistributedSampler order);
DDP's all-reduces are counted by a comm hook the check attaches to every DDP it builds,
each rank says whether the learner's function destroyed its process group before returning,
and the barriers around the checkpoint's save and loads are counted, so a load that only
happened to follow the save is told from one that must (`_LoadOrder`).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.exercises.ch05 import sampler_indices
from dpsim.course.grading.ranks import run_specs
from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.models import build_model

# float32 parameters of size ~0.1-1 after a few SGD steps: the ranks sum their gradients in
# another order than one process does, which moves the result by ~1e-7; 1e-5 is 100x that
# and far below what any of the mistakes below changes (>= 1e-3).
ABS_TOL = 1e-5


def make_model(in_features: int, hidden: int, seed: int) -> nn.Module:
    """The model of exercise 5.4 (the learner builds the same one after manual_seed(seed))."""
    return build_model("stack", seed=seed, widths=[in_features, hidden, 1], activation="tanh")


def _state(model: nn.Module | dict[str, torch.Tensor]) -> dict[str, list[float]]:
    sd = model.state_dict() if isinstance(model, nn.Module) else model
    return {k: v.detach().flatten().tolist() for k, v in sd.items()}


def reference_training(data: dict[str, list[list[float]]], config: dict[str, Any],
                       world_size: int, *, divide: bool = True, set_epoch: bool = True,
                       accumulate: bool = True) -> dict[str, list[float]]:
    """What DDP on `world_size` ranks ends with, computed by one process on the global batch."""
    model = make_model(config["in_features"], config["hidden"], config["seed"])
    x, y = torch.tensor(data["x"]), torch.tensor(data["y"])
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    b, k = config["batch_per_rank"], config["accum_steps"]
    for epoch in range(config["epochs"]):
        order = [sampler_indices(len(x), world_size, r, True, config["seed"],
                                 epoch if set_epoch else 0, False) for r in range(world_size)]
        n_micro = len(order[0]) // b
        group = k if accumulate else 1
        for step in range(n_micro // group):
            opt.zero_grad()
            for r in range(world_size):
                for m in range(step * group, (step + 1) * group):
                    idx = order[r][m * b:(m + 1) * b]
                    loss = nn.functional.mse_loss(model(x[idx]), y[idx])
                    (loss / (k if divide else 1) / world_size).backward()
            opt.step()
    return _state(model)


def _counting_hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP reads annotations
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    state.append(int(bucket.buffer().numel()))
    return allreduce_hook(None, bucket)  # None: the default group


# Every DDP the learner builds on a rank is kept until the rank exits (it exits without
# teardown). The counting hook's future runs a Python callback on gloo's worker thread, which
# takes the GIL to drop it; freeing the model when the learner's function returns destroys
# the process group, whose destructor joins that thread while holding the GIL: a deadlock
# when the last callback is still being dropped (seen in about 1 launch in 15 on a loaded
# machine, rank stuck in ~ProcessGroupGloo under ~Reducer).
_KEPT: list[Any] = []

SAVE_WAIT_S = 60.0  # how long a rank's load of the checkpoint waits for rank 0's save


class _LoadOrder:
    """Whether a rank's load of the checkpoint comes after rank 0's save by construction,
    decided from the order of calls, never from timing.

    Barriers are counted (dist.barrier, dist.monitored_barrier): rank 0 notes how many it
    had entered when its save of the checkpoint returned; every other rank how many it had
    left when it loads. Rank r's k-th barrier returns only after rank 0 entered its k-th,
    so the load follows the save for certain when the load's count exceeds the save's. A
    load on rank r > 0 also waits (in this process: no message) until rank 0's save has
    returned, so that the learner's function runs to the end whatever the order, and the
    mistake is named instead of a missing file.
    """

    def __init__(self, rank: int, checkpoint: str) -> None:
        self.rank, self.checkpoint = rank, os.path.realpath(checkpoint)
        self.entered = self.left = 0  # barriers entered / left on this rank
        self.barriers_before_save: int | None = None  # rank 0: at its last save
        self.barriers_before_load: int | None = None  # rank > 0: at its first load
        self.marker = checkpoint + ".saved"

    def _mine(self, f: Any) -> bool:
        return isinstance(f, (str, os.PathLike)) and os.path.realpath(f) == self.checkpoint

    def barrier(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def barrier(*args: Any, **kwargs: Any) -> Any:
            self.entered += 1
            out = real(*args, **kwargs)
            self.left += 1
            return out
        return barrier

    def save(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            out = real(obj, f, *args, **kwargs)
            if self.rank == 0 and self._mine(f):
                self.barriers_before_save = self.entered
                with open(self.marker, "w") as marker:
                    marker.write("saved")
            return out
        return save

    def load(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            if self.rank > 0 and self._mine(f) and self.barriers_before_load is None:
                self.barriers_before_load = self.left
                deadline = time.monotonic() + SAVE_WAIT_S
                while not os.path.exists(self.marker) and time.monotonic() < deadline:
                    time.sleep(0.02)
            return real(f, *args, **kwargs)
        return load

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """torch.save, torch.load and the barriers wrapped while inside."""
        import torch.distributed as dist

        undo = [(owner, name, getattr(owner, name)) for owner, name in (
            (torch, "save"), (torch, "load"), (dist, "barrier"), (dist, "monitored_barrier"))]
        for owner, name, real in undo:
            wrap = self.save if name == "save" else self.load if name == "load" else self.barrier
            setattr(owner, name, wrap(real))
        try:
            yield
        finally:
            for owner, name, real in undo:
                setattr(owner, name, real)


def _train_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                  init_method: str, path: str) -> dict[str, Any]:
    """On a real rank: the learner's training with DDP's all-reduces counted and the order
    of the checkpoint's save and loads watched (`_LoadOrder`)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    calls: list[int] = []
    original = DDP.__init__

    def counted_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        self.register_comm_hook(calls, _counting_hook)
        _KEPT.append(self)

    checkpoint = path + ".pt"
    order = _LoadOrder(rank, checkpoint)
    DDP.__init__ = counted_init  # type: ignore[method-assign]
    try:
        with order.watching():
            loaded = fn(rank, world_size, init_method, spec["data"], spec["config"], checkpoint)
    finally:
        DDP.__init__ = original  # type: ignore[method-assign]
    import torch.distributed as dist

    out: dict[str, Any] = {"loaded": _plain_state(loaded), "synced_backwards": len(calls),
                           "destroyed_the_group": not dist.is_initialized(),
                           "barriers_before": order.barriers_before_save if rank == 0
                           else order.barriers_before_load}
    if rank == 0:
        out["checkpoint"] = (_state(torch.load(checkpoint, map_location="cpu"))
                             if os.path.exists(checkpoint) else "no file at checkpoint_path")
    return out


def _plain_state(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): (v.detach().flatten().tolist() if torch.is_tensor(v) else v)
                for k, v in value.items()}
    return f"a {type(value).__name__}, not a dict (the state_dict you loaded)"


def run_training(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int
                 ) -> dict[str, Any]:
    """Case `index`: the checkpoint file, what every rank loaded, synced backwards per rank,
    and whether each rank destroyed its process group."""
    ranks = run_specs(_train_worker, fn, specs)[index]
    saved = ranks[0]["barriers_before"]
    return {"checkpoint": ranks[0]["checkpoint"], "loaded": [r["loaded"] for r in ranks],
            "synced_backwards": [r["synced_backwards"] for r in ranks],
            "destroyed_the_group": [r["destroyed_the_group"] for r in ranks],
            # rank 0 loads its own file; another rank after a barrier rank 0 entered after
            # its save (None: it never loaded the checkpoint, or rank 0 never saved it)
            "loaded_after_rank_0_saved": [True] + [
                None if saved is None or r["barriers_before"] is None
                else r["barriers_before"] > saved for r in ranks[1:]]}


def _spec(rng: random.Random, world_size: int, accum_steps: int) -> dict[str, Any]:
    in_features, b = rng.randint(3, 6), rng.choice([2, 3])
    steps = 2  # optimizer steps per epoch: 2, so the order of the samples matters
    n = world_size * b * accum_steps * steps
    g = torch.Generator().manual_seed(rng.randint(0, 10**6))
    x = torch.randn(n, in_features, generator=g)
    y = x.sum(1, keepdim=True).sin() + 0.1 * torch.randn(n, 1, generator=g)
    config = {"in_features": in_features, "hidden": rng.choice([8, 12, 16]), "epochs": 2,
              "batch_per_rank": b, "accum_steps": accum_steps, "lr": 0.2, "momentum": 0.5,
              "seed": rng.randint(0, 999)}
    return {"world_size": world_size, "data": {"x": x.tolist(), "y": y.tolist()},
            "config": config}


NO_SYNC = ("DDP all-reduced on every micro-batch: put the forward as well as the backward of "
           "the first accum_steps - 1 micro-batches inside `with model.no_sync():` (DDP "
           "decides in the forward whether the backward syncs: a backward alone inside "
           "no_sync still all-reduces)")


@exercise("5.4", function="train_ddp", title="A complete DDP training function", points=4)
def _train_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_spec(rng, 2, 2), _spec(rng, 3, 3)]
    for index, spec in enumerate(specs):
        ws, config = spec["world_size"], spec["config"]
        right = reference_training(spec["data"], config, ws)
        n_steps = config["epochs"] * len(spec["data"]["x"]) // (
            ws * config["batch_per_rank"] * config["accum_steps"])
        n_micro = n_steps * config["accum_steps"]

        def outcome(state: Any, synced: int = n_steps, ws: int = ws, destroyed: bool = True,
                    ordered: bool = True) -> dict[str, Any]:
            return {"checkpoint": state, "loaded": [state] * ws, "synced_backwards": [synced] * ws,
                    "destroyed_the_group": [destroyed] * ws,
                    "loaded_after_rank_0_saved": [True] + [ordered] * (ws - 1)}

        label = (f"{ws} gloo ranks, {len(spec['data']['x'])} samples, batch_per_rank="
                 f"{config['batch_per_rank']}, accum_steps={config['accum_steps']}, "
                 f"epochs={config['epochs']}")
        yield Case(label, args=(specs, index), expected=outcome(right),
                   call=run_training, abs_tol=ABS_TOL, explain=_explain_training, mistakes={
                       "you did not divide the loss by accum_steps, so the accumulated "
                       "gradient is k times too large":
                           outcome(reference_training(spec["data"], config, ws, divide=False)),
                       "you did not call sampler.set_epoch(epoch): every epoch repeats the "
                       "first one's order":
                           outcome(reference_training(spec["data"], config, ws,
                                                      set_epoch=False)),
                       "you stepped the optimizer after every micro-batch instead of every "
                       "accum_steps": outcome(reference_training(
                           spec["data"], config, ws, accumulate=False), n_micro),
                       NO_SYNC: outcome(right, n_micro),
                       "you did not destroy the process group: call "
                       "dist.destroy_process_group() before returning (a group left open "
                       "keeps its connections and threads)": outcome(right, destroyed=False),
                       "you saved the DDP wrapper's state_dict (its keys start with "
                       "'module.'); save model.module.state_dict()":
                           outcome({f"module.{k}": v for k, v in right.items()}),
                       NO_BARRIER: outcome(right, ordered=False),
                   })


NO_BARRIER = ("nothing made the other ranks wait for rank 0's save: they could load the "
              "checkpoint before it was written (it worked only if rank 0 happened to be "
              "faster); call dist.barrier() after rank 0's torch.save and before every "
              "rank's torch.load")


def _explain_training(answer: Any) -> str | None:
    """A load not ordered after the save, whatever else the answer holds."""
    if isinstance(answer, dict) and False in (answer.get("loaded_after_rank_0_saved") or []):
        return f"looks like {NO_BARRIER}"
    return None
