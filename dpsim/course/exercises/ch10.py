"""Chapter 10 exercises: a checkpoint that resumes exactly, a resharding load, HSDP traffic.

Every right answer is computed here with torch itself (an uninterrupted training run;
`torch.chunk`, the split FSDP2 uses) or, for the traffic formula, with the FSDP paper's
formulas in `dpsim.sim.strategies.fsdp.hsdp` (which the learner may not call). Arguments are plain
data and tensors; answers are plain data.

10.1's harness (`run_resume`) watches the learner's run: which file `torch.save` wrote and
whether `torch.load` read it back, and, through torch's global module and optimizer hooks,
what the first forward and step after the save ran on (a model or optimizer that worked
before the save, a new model holding other values than the saved ones, or the checkpoint's).
Going on with the old objects gives the same numbers as a real resume; only this tells them
apart.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.grading.registry import Case, exercise
from dpsim.sim import hsdp_traffic

# --- 10.1 a checkpoint that resumes exactly ------------------------------------------------


def _train(weights: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor, lr: float,
           plan: list[tuple[int, bool]], zero_grad_from: int | None = None
           ) -> dict[str, list[float]]:
    """Train a Linear layer with Adam on the (step, fresh optimizer) plan; plain answer.
    `zero_grad_from` (a slip): no zero_grad, the gradients summing up from that index of
    the plan on (a new model after the checkpoint starts with none) and from the start."""
    model = nn.Linear(xs.shape[2], weights["weight"].shape[0])
    model.load_state_dict({k: v.clone() for k, v in weights.items()})
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for index, (step, fresh) in enumerate(plan):
        if fresh:
            opt = torch.optim.Adam(model.parameters(), lr=lr)
        if zero_grad_from is None or index in (0, zero_grad_from):
            opt.zero_grad()
        nn.functional.cross_entropy(model(xs[step]), ys[step]).backward()
        opt.step()
    return {k: v.detach().tolist() for k, v in model.state_dict().items()}


FROM_CHECKPOINT = "the checkpoint"
NO_FILE = "no checkpoint file: torch.save to a path, then torch.load of that path"
OLD_OBJECTS = "the model or optimizer from before the checkpoint"
NOTHING_LOADED = "a new model that loaded nothing"
HINTS = {
    NO_FILE: "no checkpoint went through a file: save with torch.save(..., path) into the "
             "temporary directory and read it back with torch.load(path, weights_only=True)",
    OLD_OBJECTS: "you went on with the model or optimizer you had before the checkpoint; "
                 "the job died, so build new ones and load the checkpoint into them",
    NOTHING_LOADED: "nothing was loaded: the fresh model trained from its own initial "
                    "values (call model.load_state_dict(state[...]) on the new model)",
}


def _path(f: Any) -> str | None:
    """The file a torch.save/torch.load argument names (a path, or an open file's name)."""
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
    return os.path.realpath(os.fspath(name)) if isinstance(name, (str, os.PathLike)) else None


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if torch.is_tensor(obj):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


class _ResumeWatch:
    """What the learner's run did with its checkpoint (see the module docstring)."""

    def __init__(self) -> None:
        self.saved: set[str] = set()
        self.loaded = False
        self.copies: list[torch.Tensor] = []  # the saved float tensors, as saved
        self.before: weakref.WeakSet[Any] = weakref.WeakSet()  # modules, optimizers used
        self.after: str | None = None  # what the first forward/step after the save ran on

    def save(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            out = real(obj, f, *args, **kwargs)
            path = _path(f)
            if path is not None:  # every file's tensors: a model and its optimizer may be
                self.saved.add(path)  # saved in two files
                self.copies += [t.detach().clone() for t in _tensors(obj)
                                if t.is_floating_point()]
            return out

        return save

    def load(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            if _path(f) in self.saved:
                self.loaded = True
            return real(f, *args, **kwargs)

        return load

    def forward(self, module: nn.Module, args: Any) -> None:
        if not self.saved:
            self.before.add(module)
        elif self.after is None:
            if module in self.before:
                self.after = OLD_OBJECTS
            elif not all(any(p.shape == c.shape and torch.equal(p.detach(), c)
                             for c in self.copies) for p in module.parameters()):
                self.after = NOTHING_LOADED
            else:
                self.after = FROM_CHECKPOINT

    def step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.saved:
            self.before.add(optimizer)
        elif optimizer in self.before:
            self.after = OLD_OBJECTS

    def verdict(self) -> str:
        if not (self.saved and self.loaded):
            return NO_FILE
        return self.after or FROM_CHECKPOINT


@contextlib.contextmanager
def _watching(watch: _ResumeWatch, fn: Callable[..., Any]) -> Iterator[None]:
    """torch.save/torch.load wrapped (as torch's names, and in the learner's globals), and
    the global forward and optimizer-step hooks on, while inside."""
    import torch.serialization as serialization
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    real: dict[str, Callable[..., Any]] = {"save": serialization.save,
                                           "load": serialization.load}
    wrapped = {"save": watch.save(real["save"]), "load": watch.load(real["load"])}
    names = getattr(fn, "__globals__", {})
    undo: list[tuple[Any, str, Any]] = []
    for owner in (torch, serialization):
        for name in ("save", "load"):
            undo.append((owner, name, getattr(owner, name)))
            setattr(owner, name, wrapped[name])
    learner_names = {k: v for k, v in names.items() if v is real["save"] or v is real["load"]}
    for key, value in learner_names.items():
        names[key] = wrapped["save"] if value is real["save"] else wrapped["load"]
    hooks = [register_module_forward_pre_hook(watch.forward),
             register_optimizer_step_pre_hook(watch.step)]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        names.update(learner_names)
        for owner, name, value in undo:
            setattr(owner, name, value)


def run_resume(fn: Callable[..., Any], weights: dict[str, torch.Tensor], xs: torch.Tensor,
               ys: torch.Tensor, lr: float, stop_at: int) -> dict[str, Any]:
    """The learner's final parameters, and what training went on from after the save."""
    watch = _ResumeWatch()
    with _watching(watch, fn):
        params = fn(weights, xs, ys, lr, stop_at)
    return {"params": params, "resumed_from": watch.verdict()}


def _explain_resume(answer: Any) -> str | None:
    """The checkpoint's own mistakes, from what the run went on from."""
    if isinstance(answer, dict):
        return HINTS.get(answer.get("resumed_from"))  # type: ignore[arg-type]
    return None


RESUME_RUNNER: Callable[..., Any] = run_resume  # Case.call: call(fn, *args)


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
        replayed = [(s, False) for s in range(stop_at)] + [(s, False)
                                                           for s in range(steps - stop_at)]

        def outcome(params: dict[str, list[float]], resumed: str = FROM_CHECKPOINT
                    ) -> dict[str, Any]:
            return {"params": params, "resumed_from": resumed}

        yield Case(f"{steps} steps of Adam(lr={lr}) on Linear({n_in}, {n_out}), interrupted "
                   f"after {stop_at} steps", args=(weights, xs, ys, lr, stop_at),
                   expected=outcome(right), rel_tol=1e-6, abs_tol=1e-7, call=RESUME_RUNNER,
                   explain=_explain_resume, mistakes={
                       "the optimizer state was not saved or not loaded (Adam started again "
                       "from zero moments)": outcome(_train(weights, xs, ys, lr, fresh_opt)),
                       "training restarted at step 0 instead of at the step after the "
                       "checkpoint": outcome(_train(weights, xs, ys, lr, again)),
                       "one step was skipped after resuming (off by one)":
                           outcome(_train(weights, xs, ys, lr, skipped)),
                       "after resuming you trained on the data from step 0 again (xs[0], "
                       "xs[1], ...); go on with the batches after the checkpoint's step":
                           outcome(_train(weights, xs, ys, lr, replayed)),
                       "the gradients were never zeroed: call optimizer.zero_grad() before "
                       "every backward (backward adds into p.grad)":
                           outcome(_train(weights, xs, ys, lr, straight, zero_grad_from=stop_at)),
                       **{words: outcome(right, kind) for kind, words in HINTS.items()},
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


ONE_TRANSFER = ("you counted one transfer of the model in the shard group; FSDP sends three "
                "per step: an all-gather in the forward, another in the backward (the "
                "parameters were resharded after the forward) and a reduce-scatter of the "
                "gradients, each (F-1)/F of the model: 3 (F-1)/F M")
TWO_TRANSFERS = ("FSDP all-gathers twice (forward and backward) and reduce-scatters once: 3 "
                 "transfers of (F-1)/F of the model")
WHOLE_MODEL = ("each of the 3 transfers sends (F-1)/F of the model, not all of it: a rank "
               "keeps its own 1/F; and with F = 1 nothing goes over the shard group")
REPLICATE_TIMES_3 = ("the factor 3 is the shard group's alone: across replicas one "
                     "all-reduce of the gradient shard (2 (R-1)/R of M/F) runs per step, "
                     "no all-gathers")


def _explain_traffic(shards: dict[int, str], replicates: dict[int, str], answer: Any
                     ) -> str | None:
    """A shard or replicate count named by its own slip, whatever the other one is."""
    if not isinstance(answer, dict):
        return None
    pairs = ((shards, answer.get("shard")), (replicates, answer.get("replicate")))
    words = [table[v] for table, v in pairs if isinstance(v, int) and v in table]
    return "looks like " + "; and ".join(words) if words else None


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
        shards = {m * (shard - 1) // shard: ONE_TRANSFER,
                  2 * m * (shard - 1) // shard: TWO_TRANSFERS, 3 * m: WHOLE_MODEL}
        replicates = {3 * t.replicate_bytes: REPLICATE_TIMES_3}
        shards.pop(t.shard_bytes, None)  # F = 1: every count of the shard group is 0
        replicates.pop(t.replicate_bytes, None)  # R = 1: nothing across replicas
        yield Case(f"n_params={n_params:,} (bf16), world_size={world}, shard_size={shard}",
                   args=(n_params, world, shard, 2),
                   expected={"shard": t.shard_bytes, "replicate": t.replicate_bytes},
                   explain=functools.partial(_explain_traffic, shards, replicates),
                   mistakes={
                       "the all-reduce across replicas moves the gradient shard (1/F of the "
                       "model), not the whole model": {
                           "shard": t.shard_bytes, "replicate": 2 * m * (r - 1) // r},
                       **{words: {"shard": value, "replicate": t.replicate_bytes}
                          for value, words in shards.items()},
                       REPLICATE_TIMES_3: {"shard": t.shard_bytes,
                                           "replicate": 3 * t.replicate_bytes},
                   })
