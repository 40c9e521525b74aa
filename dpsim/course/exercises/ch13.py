"""Chapter 13 exercises: a token-mean loss over ranks and micro-batches, an exact resume, and
an evaluation without the sampler's duplicates.

13.1 runs the learner's loss on real gloo ranks (`course.grading.ranks.run_specs`): every
rank forwards its micro-batches through the same `nn.Linear`, sums the losses the learner
returns, calls backward once and averages the gradients over the ranks as DDP does
(all-reduce, divide by world_size). The right answer is one process's gradient of the mean
over every real token of the optimizer step; each named mistake is the gradient of the
same tokens weighted the way that mistake weighs them.

13.2 calls the learner's loop for each rank in turn, twice (interrupted after `stop_at`
steps, then resumed from the file it wrote) and compares the sample ids and random draws of
every step with an uninterrupted run computed here from torch's own `DistributedSampler`
order and a seeded generator. 13.3 runs on gloo ranks too: each rank evaluates its
`DistributedSampler` share; the right answer, on every rank, is (correct, count) over the
data set with each sample counted once.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from dpsim.course.grading.ranks import join, run_specs
from dpsim.course.grading.registry import Case, exercise

# --- 13.1 a token-mean loss over ranks and micro-batches ------------------------------------

# float32 gradients of size ~0.01-0.5: the ranks sum in another order than one process,
# which moves them by ~1e-7; the mistakes below move them by >= 1e-3
LOSS_ABS_TOL = 1e-5
N_FEATURES, VOCAB = 4, 5


def _loss_spec(rng: random.Random, world_size: int, micro: int) -> dict[str, Any]:
    """Every rank's micro-batches: 2 sequences each, padded to the micro-batch's longest."""
    g = torch.Generator().manual_seed(rng.randint(0, 10**6))
    pad_id = rng.randrange(VOCAB)
    xs, ts = [], []
    for _rank in range(world_size):
        rank_x, rank_t = [], []
        for _m in range(micro):
            lens = torch.randint(1, 9, (2,), generator=g)
            t = int(lens.max())
            x = torch.randn(2, t, N_FEATURES, generator=g)
            y = torch.randint(0, VOCAB, (2, t), generator=g)
            y[y == pad_id] = (pad_id + 1) % VOCAB  # a real token is never the pad id
            y[torch.arange(t)[None, :] >= lens[:, None]] = pad_id
            rank_x.append(x.tolist())
            rank_t.append(y.tolist())
        xs.append(rank_x)
        ts.append(rank_t)
    w = torch.randn(VOCAB, N_FEATURES, generator=g) * 0.5
    b = torch.randn(VOCAB, generator=g) * 0.1
    return {"world_size": world_size, "x": xs, "targets": ts, "pad_id": pad_id,
            "weight": w.tolist(), "bias": b.tolist()}


def _linear(spec: dict[str, Any]) -> nn.Linear:
    model = nn.Linear(N_FEATURES, VOCAB)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(spec["weight"]))
        model.bias.copy_(torch.tensor(spec["bias"]))
    return model


def _grads(model: nn.Module) -> dict[str, list[Any]]:
    return {n: p.grad.tolist() if p.grad is not None else [] for n, p in model.named_parameters()}


def weighted_gradient(spec: dict[str, Any], weight: Callable[[int, int, dict[str, Any]], float],
                      *, with_pad: bool = False) -> dict[str, list[Any]]:
    """The gradient, in one process, of (1/N) sum over ranks r and micro-batches m of
    weight(r, m, counts) * (summed token loss of (r, m)); `counts` holds the real tokens
    ("rm", "r", "m", "all": per micro-batch, per rank, per micro-batch index, in all).
    `with_pad`: padding positions counted as tokens of class pad_id.

    Written out, not through autograd (a case builds seven of them): the gradient of a
    token's cross-entropy with respect to its logits is softmax(logits) - onehot(target),
    so the Linear layer's weight gets that times the token's input, its bias that."""
    model = _linear(spec)
    pad, n = spec["pad_id"], spec["world_size"]
    terms: list[tuple[int, int, torch.Tensor, torch.Tensor]] = []
    rm: list[list[int]] = []
    with torch.no_grad():
        for r, (rank_x, rank_t) in enumerate(zip(spec["x"], spec["targets"], strict=True)):
            rm.append([])
            for m, (x, t) in enumerate(zip(rank_x, rank_t, strict=True)):
                x_tok = torch.tensor(x).flatten(0, 1)
                t_tok = torch.tensor(t).flatten()
                keep = t_tok >= 0 if with_pad else t_tok != pad  # targets are >= 0
                x_tok, t_tok = x_tok[keep], t_tok[keep]
                z = model(x_tok)
                p = z.exp()  # softmax written out: torch.softmax and max start a thread
                p = p / p.sum(-1, keepdim=True)  # pool, slow for tiny tensors (|z| < 10)
                g = p - F.one_hot(t_tok, VOCAB).float()
                terms.append((r, m, x_tok, g))
                rm[r].append(len(t_tok))
    counts = {"rm": rm, "r": [sum(r) for r in rm],
              "m": [sum(r[m] for r in rm) for m in range(len(rm[0]))],
              "all": sum(sum(r) for r in rm)}
    grad_w = torch.zeros(VOCAB, N_FEATURES)
    grad_b = torch.zeros(VOCAB)
    for r, m, x_tok, g in terms:
        c = weight(r, m, counts) / n
        grad_w += c * g.T @ x_tok
        grad_b += c * g.sum(0)
    return {"weight": grad_w.tolist(), "bias": grad_b.tolist()}


def _loss_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                 init_method: str, path: str) -> Any:
    """On a real rank: the learner's losses, summed, backward, gradients averaged as DDP."""
    import torch.distributed as dist

    with join(rank, world_size, init_method):
        model = _linear(spec)
        logits = [model(torch.tensor(x)) for x in spec["x"][rank]]
        targets = [torch.tensor(t) for t in spec["targets"][rank]]
        losses = fn(logits, targets, spec["pad_id"])
        if not isinstance(losses, (list, tuple)) or len(losses) != len(logits) or not all(
                torch.is_tensor(v) and v.numel() == 1 and v.requires_grad for v in losses):
            return (f"a list of {len(logits)} one-element tensors that require grad (one loss "
                    f"per micro-batch), not {type(losses).__name__}")
        sum(v.reshape(()) for v in losses).backward()
        for p in model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)  # what DDP's all-reduce leaves: the mean over ranks
            p.grad /= world_size
        return _grads(model)


def run_losses(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int) -> Any:
    """Case `index`: rank 0's averaged gradient (every rank holds the same)."""
    return run_specs(_loss_worker, fn, specs)[index][0]


def _loss_case(specs: list[dict[str, Any]], index: int) -> Case:
    """Case `index` of 13.1: the right gradient and each mistake's."""
    spec = specs[index]
    n, micro = spec["world_size"], len(spec["x"][0])

    def grad(weight: Callable[[int, int, dict[str, Any]], float], with_pad: bool = False
             ) -> dict[str, list[Any]]:
        return weighted_gradient(spec, weight, with_pad=with_pad)

    tokens = [[int((torch.tensor(t) != spec["pad_id"]).sum()) for t in rank]
              for rank in spec["targets"]]
    return Case(f"{n} gloo ranks, {micro} micro-batches each, pad_id={spec['pad_id']}, "
                f"real tokens per rank and micro-batch {tokens}",
                args=(specs, index), expected=grad(lambda r, m, c: n / c["all"]),
                call=run_losses, abs_tol=LOSS_ABS_TOL, mistakes={
                    "the mean of means: each micro-batch's own token mean (divided by the "
                    "number of micro-batches) weighs a token of a short micro-batch more; "
                    "divide the summed loss by the token count of the whole step":
                        grad(lambda r, m, c: 1 / (micro * c["rm"][r][m])),
                    "each micro-batch's token mean, summed over the micro-batches: the "
                    "gradient is accum_steps times too large, and a token of a short "
                    "micro-batch weighs more; divide the summed loss by the token count of "
                    "the whole step": grad(lambda r, m, c: 1 / c["rm"][r][m]),
                    "each rank divided by its own token count: DDP then averages the "
                    "ranks' means; all-reduce the count so every rank divides by the "
                    "global one": grad(lambda r, m, c: 1 / c["r"][r]),
                    "each micro-batch divided by its own global count (all-reduced per "
                    "micro-batch): the divisor is the count of the whole optimizer step":
                        grad(lambda r, m, c: n / (micro * c["m"][m])),
                    "divided by the global token count but not multiplied by world_size: "
                    "DDP divides the summed gradients by world_size, so the gradient is "
                    "world_size times too small": grad(lambda r, m, c: 1 / c["all"]),
                    "the padding was counted: pass ignore_index=pad_id to cross_entropy "
                    "and count only targets != pad_id":
                        grad(lambda r, m, c: n / c["all"], with_pad=True),
                })


@exercise("13.1", function="step_losses",
          title="Normalise a token-mean loss over every rank and micro-batch of an optimizer "
                "step", points=3)
def _loss_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_loss_spec(rng, 2, 2), _loss_spec(rng, 3, 3), _loss_spec(rng, 2, 3)]
    for index in range(len(specs)):
        yield _loss_case(specs, index)


# --- 13.2 an exact resume: no sample replayed, none skipped ---------------------------------


def sampler_batches(n_samples: int, world_size: int, rank: int, seed: int, epoch: int,
                    batch_size: int) -> list[list[int]]:
    """The batches of `rank` in `epoch`: torch's DistributedSampler order, chunked as a
    DataLoader does (the last batch may be smaller)."""
    from torch.utils.data import Dataset, DistributedSampler

    sampler: DistributedSampler[int] = DistributedSampler(
        cast("Dataset[int]", range(n_samples)), world_size, rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    order = list(sampler)
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def reference_run(n_samples: int, world_size: int, rank: int, batch_size: int, seed: int,
                  steps: int, *, plan: list[tuple[int, int]] | None = None,
                  reseed_at: int | None = None, extra_draws: dict[int, int] | None = None
                  ) -> dict[str, list[Any]]:
    """The ids and draws of `steps` steps of rank `rank`. `plan`: the (epoch, batch) of each
    step (default: uninterrupted); `reseed_at`: the step at which the generator is seeded
    again (a resume that did not restore it); `extra_draws`: {step: draws made before it}."""
    if plan is None:
        plan = uninterrupted_plan(n_samples, world_size, batch_size, steps)
    g = torch.Generator().manual_seed(seed + rank)
    ids, draws = [], []
    for step, (epoch, batch) in enumerate(plan):
        if step == reseed_at:
            g.manual_seed(seed + rank)
        for _ in range((extra_draws or {}).get(step, 0)):
            torch.empty((), dtype=torch.int64).random_(generator=g)
        ids.append(sampler_batches(n_samples, world_size, rank, seed, epoch, batch_size)[batch])
        draws.append(torch.rand((), generator=g).item())
    return {"ids": ids, "draws": draws}


def batches_per_epoch(n_samples: int, world_size: int, batch_size: int) -> int:
    """A rank's batches per epoch: ceil(ceil(n_samples / world_size) / batch_size)."""
    return math.ceil(math.ceil(n_samples / world_size) / batch_size)


def uninterrupted_plan(n_samples: int, world_size: int, batch_size: int, steps: int
                       ) -> list[tuple[int, int]]:
    """(epoch, batch) of each of `steps` steps of an uninterrupted run."""
    per_epoch = batches_per_epoch(n_samples, world_size, batch_size)
    return [(s // per_epoch, s % per_epoch) for s in range(steps)]


def _plain_steps(out: Any) -> Any:
    """The learner's [(ids, draw), ...] as {"ids": [...], "draws": [...]}, or a description."""
    if not isinstance(out, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and len(s) == 2 for s in out):
        return f"a list of (ids, draw) pairs, one per step, not {type(out).__name__}"
    ids = [s[0].tolist() if torch.is_tensor(s[0]) else list(s[0]) for s in out]
    draws = [float(s[1]) for s in out]
    return {"ids": ids, "draws": draws}


def run_resume(fn: Callable[..., Any], n_samples: int, world_size: int, batch_size: int,
               seed: int, total: int, stop_at: int) -> list[Any]:
    """Per rank: the steps of the learner's run interrupted after `stop_at` steps and
    resumed from its file in a fresh call, joined."""
    out = []
    with tempfile.TemporaryDirectory() as folder:
        for rank in range(world_size):
            path = os.path.join(folder, f"rank{rank}.pt")
            state = torch.get_rng_state()
            first = _plain_steps(fn(rank, world_size, n_samples, batch_size, seed, stop_at,
                                    path, False))
            torch.manual_seed(12345)  # the job died: a new process's generator
            second = _plain_steps(fn(rank, world_size, n_samples, batch_size, seed,
                                     total - stop_at, path, True))
            torch.set_rng_state(state)
            if isinstance(first, str) or isinstance(second, str):
                out.append(first if isinstance(first, str) else second)
                continue
            out.append({"ids": first["ids"] + second["ids"],
                        "draws": first["draws"] + second["draws"]})
    return out


RESUME_RUNNER: Callable[..., Any] = run_resume


def _resume_case(n_samples: int, ws: int, b: int, total: int, stop: int, seed: int) -> Case:
    """A 13.2 case: `total` steps interrupted after `stop`, and the usual mistakes."""
    plan = uninterrupted_plan(n_samples, ws, b, total)
    per_epoch = batches_per_epoch(n_samples, ws, b)
    stop_epoch, stop_batch = plan[stop]

    def each(**kw: Any) -> list[dict[str, list[Any]]]:
        return [reference_run(n_samples, ws, r, b, seed, total, **kw) for r in range(ws)]

    def with_plan(resumed: list[tuple[int, int]]) -> list[dict[str, list[Any]]]:
        return each(plan=plan[:stop] + resumed[:total - stop])

    restart = uninterrupted_plan(n_samples, ws, b, total)
    epoch_start = [(stop_epoch, i) for i in range(per_epoch)] + \
        [(e, i) for e in range(stop_epoch + 1, stop_epoch + 4) for i in range(per_epoch)]
    next_epoch = [(e, i) for e in range(stop_epoch + 1, stop_epoch + 4)
                  for i in range(per_epoch)]
    no_set_epoch = [(0, i) for (_e, i) in plan[stop:]]
    # a loader without its own generator draws when each epoch's iterator is created, and
    # when the resumed run creates its own (twice if it resumes at an epoch's end: the
    # finished epoch's iterator, then the next one's)
    loader_draws = {s: 1 for s in range(total) if plan[s][1] == 0}
    loader_draws[stop] = 2 if stop_batch == 0 else 1
    mistakes: dict[str, Any] = {
        "training restarted at step 0 (epoch 0, first batch) after the resume: the "
        "resumed run replays every sample seen before the checkpoint": with_plan(restart),
        "the resumed run started its epoch from the first batch: save the loader "
        "position (batches done in this epoch) and skip that many": with_plan(epoch_start),
        "the resumed run went on at the next epoch: the rest of the interrupted epoch was "
        "skipped": with_plan(next_epoch) if stop_batch != 0 else None,
        "the resumed run did not call sampler.set_epoch(epoch) with the saved epoch: "
        "the sampler shuffled as in epoch 0": with_plan(no_set_epoch)
        if stop_epoch != 0 else None,
        "the random generator was not restored: save torch.get_rng_state() and "
        "torch.set_rng_state(...) it on resume": each(reseed_at=stop),
        "the DataLoader drew a seed from torch's global generator when its iterator was "
        "created: build it with generator=torch.Generator()": each(extra_draws=loader_draws),
    }
    return Case(f"{n_samples} samples on {ws} ranks, batch_size={b}, seed={seed}: "
                f"{total} steps, interrupted after {stop}",
                args=(n_samples, ws, b, seed, total, stop), expected=each(),
                call=RESUME_RUNNER, mistakes=mistakes)


@exercise("13.2", function="run_steps",
          title="Resume a DistributedSampler run exactly: no sample replayed, none skipped, "
                "the same random draws", points=3)
def _resume_cases(rng: random.Random) -> Iterator[Case]:
    # (n_samples, world_size, batch_size, total steps, stop_at): stops mid-epoch, at an
    # epoch's end, and in the first epoch; a dataset that does not divide by world_size
    shapes = [(24, 2, 4, 8, 4), (20, 2, 5, 6, 2), (rng.randint(25, 31), 3, 3, 9, 2)]
    for n_samples, ws, b, total, stop in shapes:
        yield _resume_case(n_samples, ws, b, total, stop, rng.randint(0, 999))


# --- 13.3 evaluation under DDP: every sample counted once -----------------------------------


def _eval_spec(rng: random.Random, world_size: int, n_samples: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(rng.randint(0, 10**6))
    x = torch.randn(n_samples, 3, generator=g)
    labels = torch.randint(0, 2, (n_samples,), generator=g)
    w = torch.randn(2, 3, generator=g)
    return {"world_size": world_size, "x": x.tolist(), "labels": labels.tolist(),
            "weight": w.tolist()}


def _eval_worker(rank: int, world_size: int, fn: Callable[..., Any], spec: dict[str, Any],
                 init_method: str, path: str) -> Any:
    from torch.utils.data import TensorDataset

    with join(rank, world_size, init_method):
        model = nn.Linear(3, 2, bias=False)
        with torch.no_grad():
            model.weight.copy_(torch.tensor(spec["weight"]))
        dataset = TensorDataset(torch.tensor(spec["x"]), torch.tensor(spec["labels"]))
        out = fn(model, dataset, rank, world_size)
    try:
        return [int(out[0]), int(out[1])]
    except (TypeError, ValueError, IndexError, KeyError, RuntimeError):
        return f"a pair (correct, count), not {type(out).__name__}"


def run_eval(fn: Callable[..., Any], specs: list[dict[str, Any]], index: int) -> Any:
    """Case `index`: every rank's (correct, count)."""
    return run_specs(_eval_worker, fn, specs)[index]


def _accuracy_counts(spec: dict[str, Any], rank: int, *, dedup: bool = True,
                     reduce: bool = True, drop_last: bool = False) -> list[int]:
    """(correct, count) rank `rank` returns: the right ones, or those of a mistake."""
    from torch.utils.data import Dataset, DistributedSampler

    x, labels = torch.tensor(spec["x"]), torch.tensor(spec["labels"])
    w = torch.tensor(spec["weight"])
    n, ws = len(labels), spec["world_size"]
    correct = total = 0
    for r in range(ws) if reduce else [rank]:
        idx: list[int] = list(DistributedSampler(cast("Dataset[int]", range(n)), ws, r,
                                                 shuffle=False, drop_last=drop_last))
        keep = [i for k, i in enumerate(idx) if not dedup or k * ws + r < n]
        hits = (x[keep] @ w.T).argmax(1) == labels[keep]
        correct, total = correct + int(hits.sum()), total + len(keep)
    return [correct, total]


def _eval_case(specs: list[dict[str, Any]], index: int) -> Case:
    spec = specs[index]
    ws, n = spec["world_size"], len(spec["labels"])

    def per_rank(**kw: Any) -> list[list[int]]:
        return [_accuracy_counts(spec, r, **kw) for r in range(ws)]

    return Case(f"{n} samples on {ws} gloo ranks", args=(specs, index),
                expected=per_rank(), call=run_eval, mistakes={
                    "samples were counted twice: DistributedSampler pads its list with "
                    "copies until it divides by world_size; rank r's i-th sample sits at "
                    "position i * world_size + r, so drop positions >= len(dataset)":
                        per_rank(dedup=False),
                    "samples were skipped: DistributedSampler(drop_last=True) drops the "
                    "tail instead of padding; keep drop_last=False and drop the copies":
                        per_rank(drop_last=True, dedup=False),
                    "each rank returned its own counts: all-reduce correct and count so "
                    "every rank returns the data set's": per_rank(reduce=False),
                })


@exercise("13.3", function="evaluate",
          title="Evaluate under DDP: all-reduced counts, DistributedSampler's copies removed",
          points=2)
def _eval_cases(rng: random.Random) -> Iterator[Case]:
    specs = [_eval_spec(rng, 3, 10), _eval_spec(rng, 4, rng.choice([13, 14, 15])),
             _eval_spec(rng, 2, 9)]
    for index in range(len(specs)):
        yield _eval_case(specs, index)
