"""Chapter 2's harness (2.3 to 2.7): a learner's point-to-point function on real gloo ranks,
with every message counted.

`run_on_ranks(fn, kind, world_size, items)` launches `world_size` gloo ranks
(`dpsim.runtime.launch`); on each, `dist.isend/irecv/send/recv` are wrapped so that every
message is logged (peer, elements) and the collectives (`dist.all_gather`, ...) are wrapped
so that calling one is noticed. The learner's function then runs once per item on the
rank's own data (`rank_data`: small whole numbers in float32, so every sum is exact in
any order) and the rank returns plain data: the result as a list, whether the input was
left unchanged, and the messages it sent and received. Nothing is compared here: the
expected answers are computed in the grader (`ch02_p2p_answers`) from the same `rank_data`.
Every rank runs in the launcher's own process group; the other chapters' harnesses, which
give each case a group of its own, use `dpsim.course.grading.ranks.run_specs`.

Kinds: "all_gather" fn(tensor) -> tensor; "reduce_scatter" fn(tensor) -> tensor;
"all_reduce" fn(tensor) (in place, or returns the result); "pipelined" fn(tensor,
n_segments) (the same); "broadcast" fn(tensor, root) (in place on every rank).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dpsim.course.grading.ranks import rank_error

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "pipelined", "broadcast")
P2P = {"isend": "dst", "irecv": "src", "send": "dst", "recv": "src"}
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "reduce", "scatter", "gather",
               "all_to_all", "all_to_all_single", "batch_isend_irecv")
LAUNCH_TIMEOUT_S = 60.0
# dpsim functions that answer an exercise (its `forbidden`): on the ranks, out of the
# sandbox's reach, a call is recorded among the collectives and does nothing
FORBIDDEN = {"all_reduce": ("dpsim.labs.ch02_collectives.collective_workers.ring_all_reduce_",),
             "pipelined": ("dpsim.labs.ch02_collectives.collective_workers.ring_all_reduce_",)}
# what a case compares, per kind: results, untouched inputs, peers of every message
FIELDS = {"all_gather": ("result", "unchanged", "sent_to", "received_from"),
          "reduce_scatter": ("result", "unchanged", "sent_to", "received_from"),
          "all_reduce": ("result", "sent_to", "received_from"),
          "pipelined": ("result", "sent_to", "received_from", "largest_send"),
          "broadcast": ("result", "sent_to", "received_from")}


def rank_data(seed: int, rank: int, length: int) -> torch.Tensor:
    """Rank `rank`'s input: `length` whole numbers in -9..9 as float32, fixed by `seed`."""
    gen = torch.Generator().manual_seed(seed * 1009 + rank)
    return torch.randint(-9, 10, (length,), generator=gen).to(torch.float32)


def _instrument(log: list[tuple[str, int, int]], used: list[str]) -> None:
    """Wrap torch.distributed's point-to-point calls (logged) and collectives (noticed)."""
    import torch.distributed as dist

    def p2p(name: str, peer_key: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tensor = args[0] if args else kwargs.get("tensor")
            peer = args[1] if len(args) > 1 else kwargs.get(peer_key)
            numel = tensor.numel() if isinstance(tensor, torch.Tensor) else -1
            log.append((name, -1 if peer is None else int(peer), numel))
            return original(*args, **kwargs)
        return wrapper

    def collective(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            used.append(name)
            return original(*args, **kwargs)
        return wrapper

    for name, peer_key in P2P.items():
        setattr(dist, name, p2p(name, peer_key, getattr(dist, name)))
    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, collective(name, getattr(dist, name)))


def _forbid(fn: Callable[..., Any], names: tuple[str, ...], used: list[str]) -> None:
    """Replace each dotted name (and fn's global references to it) by a recorder that
    does nothing and returns its first argument."""
    import importlib

    for name in names:
        module_name, _, attr = name.rpartition(".")
        module = importlib.import_module(module_name)
        original = getattr(module, attr)

        def recorder(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            used.append(_name)
            return args[0] if args else None

        setattr(module, attr, recorder)
        scope = getattr(fn, "__globals__", {})
        for key, value in list(scope.items()):
            if value is original:
                scope[key] = recorder


def _call(fn: Callable[..., Any], kind: str, data: torch.Tensor, item: dict[str, Any]
          ) -> tuple[Any, torch.Tensor]:
    """Run fn on `data` as `kind` asks; return (what it returned, what the answer is)."""
    if kind in ("all_gather", "reduce_scatter"):
        out = fn(data)
        return out, out
    if kind == "broadcast":
        out = fn(data, item["root"])
        return out, data
    out = fn(data, item["n_segments"]) if kind == "pipelined" else fn(data)
    return out, out if isinstance(out, torch.Tensor) else data


def _as_list(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().reshape(-1).tolist()
    return f"not a tensor: {type(value).__name__}"


def p2p_rank(rank: int, world_size: int, jobs: list[tuple[Callable[..., Any], str,
                                                              list[dict[str, Any]]]]
             ) -> list[dict[str, Any]]:
    """On one rank: each job (fn, kind, items) on this rank's data, messages logged."""
    log: list[tuple[str, int, int]] = []
    used: list[str] = []
    _instrument(log, used)
    answers = []
    for fn, kind, items in jobs:
        per_item = []
        used.clear()
        _forbid(fn, FORBIDDEN.get(kind, ()), used)
        for item in items:
            data = rank_data(item["seed"], rank, item["length"])
            before = data.clone()
            log.clear()
            _, result = _call(fn, kind, data, item)
            unchanged = bool(torch.equal(data, before)) if kind in (
                "all_gather", "reduce_scatter") else True
            per_item.append({
                "result": _as_list(result), "unchanged": unchanged,
                "sent_to": [peer for name, peer, _ in log if name in ("isend", "send")],
                "received_from": [peer for name, peer, _ in log if name in ("irecv", "recv")],
                "largest_send": max([n for name, _, n in log if name in ("isend", "send")],
                                    default=0),
            })
        answers.append({"items": per_item, "collectives": sorted(set(used))})
    return answers


def launch_jobs(world_size: int, jobs: list[tuple[Callable[..., Any], str,
                                                  list[dict[str, Any]]]]
                ) -> list[list[dict[str, Any]]]:
    """Launch `world_size` gloo ranks once and run every job there; answers[rank][job]."""
    from dpsim.runtime.launch import LaunchTimeoutError, RankFailedError, launch

    try:
        return launch(p2p_rank, world_size, args=(jobs,), backend="gloo",
                      timeout_s=LAUNCH_TIMEOUT_S)
    except RankFailedError as exc:
        raise rank_error(exc) from None
    except LaunchTimeoutError:
        raise RuntimeError(
            f"the ranks waited forever (stopped after {LAUNCH_TIMEOUT_S:g} s): a receive "
            "with no matching send, or blocking send/recv where every rank sends first; "
            "post receives with dist.irecv and sends with dist.isend, then wait on "
            "both") from None


def dry_run(fn: Callable[..., Any], kind: str) -> None:
    """Call fn here, outside any process group: a stub or a typo fails at once, while
    a real answer stops at its first torch.distributed call (no group yet)."""
    tensor = torch.zeros(4)
    try:
        if kind == "broadcast":
            fn(tensor, 0)
        elif kind == "pipelined":
            fn(tensor, 2)
        else:
            fn(tensor)
    except (ValueError, RuntimeError) as exc:
        if "process group" not in str(exc) and "not been initialized" not in str(exc):
            raise


def per_rank(answers: list[list[dict[str, Any]]], job: int, kind: str) -> dict[str, Any]:
    """One job's answers as the plain data a case compares: field -> item -> rank."""
    n_items = len(answers[0][job]["items"])
    fields = FIELDS[kind]
    out: dict[str, Any] = {f: [[rank[job]["items"][i][f] for rank in answers]
                               for i in range(n_items)] for f in fields}
    out["collectives"] = sorted({c for rank in answers for c in rank[job]["collectives"]})
    return out


def run_on_ranks(fn: Callable[..., Any], kind: str, world_size: int,
                 items: list[dict[str, Any]]) -> dict[str, Any]:
    """What `fn` did on `world_size` real gloo ranks, item by item (see the module doc)."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")
    dry_run(fn, kind)
    return per_rank(launch_jobs(world_size, [(fn, kind, items)]), 0, kind)
