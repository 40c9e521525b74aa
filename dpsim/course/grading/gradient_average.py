"""The machinery of exercise 5.2 (gradients averaged by hand): the harness that runs the
learner's function on 2 real gloo ranks in the sandbox, and what the grader computes itself
(each rank's own gradients, their average) and says about a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dpsim.course.grading.core import rank_error

AVERAGE = "every rank holds the average of the ranks' gradients"
SPECS = [  # (hidden, seed, frozen first layer)
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
    for hidden, seed, frozen in SPECS:
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


def combine(ranks: list[dict[str, dict[str, list[float]]]], scale: float
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
        target = combine(ranks, scale)
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


def local_grads(index: int, world_size: int = 2) -> list[dict[str, list[float]]]:
    """Each rank's own gradients for model `index` (as `_average_rank` makes them)."""
    hidden, seed, frozen = SPECS[index]
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
