"""Chapter 2's harness (2.3 to 2.7): a learner's point-to-point function on real gloo ranks,
with every message counted.

`run_on_ranks(fn, kind, world_size, items)` launches `world_size` gloo ranks
(`dpsim.runtime.launch`); on each, the ProcessGroup's methods, where every message and
collective ends up however the learner calls it (`dist.isend`, an imported `isend`,
`dist.batch_isend_irecv` of `dist.P2POp`s), are wrapped: every message is logged (peer,
elements), every wait on a receive too, and calling a collective (`dist.all_reduce`, an
imported `all_reduce`, ...) is noticed; so is a functional collective
(`torch.distributed._functional_collectives`, which reaches the backend without any
ProcessGroup method), seen by a dispatch mode as the op it runs (`distributed_ops`). The
learner's function then runs once per item on the rank's own data (`rank_data`: small
whole numbers in float32, so every sum is exact in any order) and the rank returns plain
data: the result as a list, whether the input was left unchanged, and the messages it sent
and received. Nothing is compared here: the
expected answers are computed in the grader (`ch02_p2p_answers`) from the same `rank_data`.
Every rank runs in the launcher's own process group; the other chapters' harnesses, which
give each case a group of its own, use `dpsim.course.grading.ranks.run_specs`.

Kinds: "all_gather" fn(tensor) -> tensor; "reduce_scatter" fn(tensor) -> tensor;
"all_reduce" fn(tensor) (in place: what it returns is not looked at); "pipelined"
fn(tensor, n_segments) (in place, or returns the result; a segment must go on before its
whole chunk arrived: `forwards_early`); "broadcast" fn(tensor, root) (in place on every rank).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from dpsim.course.grading.ranks import rank_error

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "pipelined", "broadcast")
# ProcessGroup methods, where every message and collective of torch.distributed ends up
# (dist.isend, an imported isend, batch_isend_irecv with P2POp, dist.all_reduce, an
# imported all_reduce ...): messages are logged, collectives noticed by the name the
# learner calls (barriers move no data and are allowed)
MESSAGES = {"send": "isend", "recv": "irecv", "recv_anysource": "irecv"}
COLLECTIVES = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
               "allgather": "all_gather", "allgather_coalesced": "all_gather",
               "_allgather_base": "all_gather_into_tensor",
               "all_gather_single": "all_gather_into_tensor",
               "all_gather_single_coalesced": "all_gather_into_tensor",
               "allgather_into_tensor_coalesced": "all_gather_into_tensor",
               "reduce_scatter": "reduce_scatter",
               "_reduce_scatter_base": "reduce_scatter_tensor",
               "reduce_scatter_single": "reduce_scatter_tensor",
               "reduce_scatter_single_coalesced": "reduce_scatter_tensor",
               "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
               "broadcast": "broadcast", "reduce": "reduce", "scatter": "scatter",
               "gather": "gather", "alltoall": "all_to_all", "alltoall_base": "all_to_all_single",
               "all_to_all_single": "all_to_all_single"}
# torch's dispatcher ops that move data between ranks, by namespace: c10d's (what the
# ProcessGroup's methods run) and the functional collectives' (what
# torch.distributed._functional_collectives runs without any ProcessGroup method: its
# legacy and autograd names too). A dispatch mode on the ranks notices their collectives by
# the same names as COLLECTIVES (a trailing "_", "_out" or "_coalesced" left off)
OP_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd")
OP_COLLECTIVES = {"allreduce": "all_reduce", "all_reduce": "all_reduce",
                  "allgather": "all_gather", "_allgather_base": "all_gather_into_tensor",
                  "allgather_into_tensor": "all_gather_into_tensor",
                  "all_gather_into_tensor": "all_gather_into_tensor",
                  "reduce_scatter": "reduce_scatter",
                  "_reduce_scatter_base": "reduce_scatter_tensor",
                  "reduce_scatter_tensor": "reduce_scatter_tensor",
                  "broadcast": "broadcast", "reduce": "reduce", "scatter": "scatter",
                  "gather": "gather", "alltoall": "all_to_all",
                  "alltoall_base": "all_to_all_single", "all_to_all_single": "all_to_all_single"}
# their ops that are no collective: messages (the functional ones are logged by the mode,
# c10d's by the ProcessGroup wrappers), waits, barriers
OP_NOT_COLLECTIVES = {"send", "recv", "recv_any_source", "isend", "irecv", "batch_p2p_ops",
                      "wait_tensor", "barrier", "monitored_barrier", "_wrap_tensor_autograd"}
LAUNCH_TIMEOUT_S = 60.0
RINGS = ("all_gather", "reduce_scatter", "all_reduce")  # kinds whose chunks are checked
# dpsim functions that answer an exercise (its `forbidden`): on the ranks, out of the
# sandbox's reach, a call is recorded among the collectives and does nothing
FORBIDDEN = {"all_reduce": ("dpsim.runtime.collective_workers.ring_all_reduce_",),
             "pipelined": ("dpsim.runtime.collective_workers.ring_all_reduce_",)}
# what a case compares, per kind: results, untouched inputs, peers of every message, for the
# rings the first message that carried another chunk than the exercise's schedule sends
# (`wrong_chunk`), and for the pipelined ring whether a segment went on before its whole
# chunk arrived
FIELDS = {"all_gather": ("result", "unchanged", "sent_to", "received_from", "wrong_chunk"),
          "reduce_scatter": ("result", "unchanged", "sent_to", "received_from", "wrong_chunk"),
          "all_reduce": ("result", "sent_to", "received_from", "wrong_chunk"),
          "pipelined": ("result", "sent_to", "received_from", "largest_send",
                        "forwards_early"),
          "broadcast": ("result", "sent_to", "received_from")}


def rank_data(seed: int, rank: int, length: int) -> torch.Tensor:
    """Rank `rank`'s input: `length` whole numbers in -9..9 as float32, fixed by `seed`."""
    gen = torch.Generator().manual_seed(seed * 1009 + rank)
    return torch.randint(-9, 10, (length,), generator=gen).to(torch.float32)


def first_wrong_chunk(sent: list[list[float]], schedule: list[list[float]]) -> int:
    """Index of the first message whose content differs from the schedule's (-1: none, or
    not judged when the number of messages differs: the message count tells that)."""
    if len(sent) != len(schedule):
        return -1
    return next((k for k, (a, b) in enumerate(zip(sent, schedule, strict=True)) if a != b), -1)


def _content(tensors: Any) -> list[float]:
    items = tensors if isinstance(tensors, list | tuple) else [tensors]
    return [x for t in items if isinstance(t, torch.Tensor)
            for x in t.detach().cpu().reshape(-1).tolist()]


def _instrument(log: list[tuple[str, int, int]], used: list[str],
                sent: list[list[float]]) -> None:
    """Wrap the ProcessGroup's messages (logged: ("isend"/"irecv", peer, elements), and
    ("wait", index of the receive in the log, 0) when the learner waits on a receive; what
    each send carries, as it was posted, in `sent`) and its collectives (noticed)."""
    from torch.distributed import ProcessGroup, Work

    receives: dict[int, int] = {}  # id of a receive's Work -> its index in the log

    def message(method: str, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Any, tensors: Any, *args: Any, **kwargs: Any) -> Any:
            items = tensors if isinstance(tensors, list | tuple) else [tensors]
            numel = sum(t.numel() for t in items if isinstance(t, torch.Tensor))
            peer = -1 if method == "recv_anysource" or not args else int(args[0])
            log.append((name, peer, numel))
            if name == "isend":
                sent.append(_content(tensors))
            index = len(log) - 1
            work = original(self, tensors, *args, **kwargs)
            if name == "irecv":
                receives[id(work)] = index
            return work
        return wrapper

    def collective(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            used.append(name)
            return original(*args, **kwargs)
        return wrapper

    original_wait = Work.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) in receives:
            log.append(("wait", receives.pop(id(self)), 0))
        return original_wait(self, *args, **kwargs)

    for method, name in MESSAGES.items():
        setattr(ProcessGroup, method, message(method, name, getattr(ProcessGroup, method)))
    for method, name in COLLECTIVES.items():
        if hasattr(ProcessGroup, method):
            setattr(ProcessGroup, method, collective(name, getattr(ProcessGroup, method)))
    setattr(Work, "wait", wait)  # noqa: B010 (a method of a C++ class, replaced)


def op_collective(namespace: str, op_name: str) -> str | None:
    """The collective a dispatcher op is (as COLLECTIVES names it), or None for any other op
    (a message, a wait, a barrier, or no op of torch.distributed at all)."""
    if namespace not in OP_NAMESPACES:
        return None
    name = op_name.rstrip("_")
    for tail in ("_out", "_coalesced"):
        name = name.removesuffix(tail)
    if name in OP_NOT_COLLECTIVES:
        return None
    return OP_COLLECTIVES.get(name, name)


def distributed_ops(log: list[tuple[str, int, int]], used: list[str],
                    sent: list[list[float]]) -> Any:
    """A dispatch mode that notices the collectives and logs the messages of torch's
    functional collectives (`torch.distributed._functional_collectives`, which reach the
    backend without any ProcessGroup method): every op of torch passes through it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class DistributedOps(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            namespace, op_name = func.namespace, func._schema.name.split("::")[-1]
            if namespace in OP_NAMESPACES:
                if op_name in ("isend", "irecv"):
                    log.append((op_name, int(args[1]), int(args[0].numel())))
                    if op_name == "isend":
                        sent.append(_content(args[0]))
                elif op_name == "batch_p2p_ops":
                    for op, peer, tensor in zip(args[0], args[1], args[3], strict=False):
                        log.append((str(op), int(peer), int(tensor.numel())))
                        if op == "isend":
                            sent.append(_content(tensor))
                else:
                    collective = op_collective(namespace, op_name)
                    if collective is not None:
                        used.append(collective)
            return func(*args, **(kwargs or {}))

    return DistributedOps()


def forwards_early(log: list[tuple[str, int, int]], n_segments: int, world_size: int
                   ) -> bool:
    """True when a send went out between the first and the last wait on the receives of
    one chunk (the receives in groups of `n_segments`, in the order they were posted): a
    segment forwarded before its whole chunk arrived. Also True (not judged) unless there
    were 2(N-1)·n_segments receives: the message count already tells that answer wrong."""
    posted = [i for i, (name, _, _) in enumerate(log) if name == "irecv"]
    if len(posted) != 2 * (world_size - 1) * n_segments:
        return True
    group_of = {index: k // n_segments for k, index in enumerate(posted)}
    waits: dict[int, list[int]] = {}
    for position, (name, index, _) in enumerate(log):
        if name == "wait" and index in group_of:
            waits.setdefault(group_of[index], []).append(position)
    sends = [i for i, (name, _, _) in enumerate(log) if name == "isend"]
    return any(first < s < last for got in waits.values() if len(got) > 1
               for first, last in [(min(got), max(got))] for s in sends)


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
    if kind == "all_reduce":  # in place: the answer is the tensor it was given
        return fn(data), data
    out = fn(data, item["n_segments"])
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
    sent: list[list[float]] = []
    _instrument(log, used, sent)
    answers = []
    for fn, kind, items in jobs:
        per_item = []
        used.clear()
        _forbid(fn, FORBIDDEN.get(kind, ()), used)
        for item in items:
            data = rank_data(item["seed"], rank, item["length"])
            before = data.clone()
            log.clear()
            sent.clear()
            used_before = len(used)
            with distributed_ops(log, used, sent):
                _, result = _call(fn, kind, data, item)
            unchanged = bool(torch.equal(data, before)) if kind in (
                "all_gather", "reduce_scatter") else True
            per_item.append({
                "result": _as_list(result), "unchanged": unchanged,
                "sent_to": [peer for name, peer, _ in log if name == "isend"],
                "received_from": [peer for name, peer, _ in log if name == "irecv"],
                "largest_send": max([n for name, _, n in log if name == "isend"], default=0),
                "forwards_early": kind == "pipelined" and forwards_early(
                    log, item["n_segments"], world_size),
                # judged on a ring of the exercise's messages only (no collective, every
                # message to rank + 1) against the schedule the grader gave with the item
                # (the rule itself stays with the grader): the other slips have hints of
                # their own
                "wrong_chunk": first_wrong_chunk(sent, item["schedule"][rank])
                if kind in RINGS and "schedule" in item and len(used) == used_before and all(
                    peer == (rank + 1) % world_size for name, peer, _ in log if name == "isend")
                else -1,
            })
        answers.append({"items": per_item, "collectives": sorted(set(used))})
    return answers


def launch_jobs(world_size: int, jobs: list[tuple[Callable[..., Any], str,
                                                  list[dict[str, Any]]]]
                ) -> list[list[dict[str, Any]]]:
    """Launch `world_size` gloo ranks once and run every job there; answers[rank][job]."""
    from dpsim.runtime.launch import DeadlockError, LaunchTimeoutError, RankFailedError, launch

    try:
        return launch(p2p_rank, world_size, args=(jobs,), backend="gloo",
                      timeout_s=LAUNCH_TIMEOUT_S)
    except RankFailedError as exc:
        raise rank_error(exc) from None
    except DeadlockError as exc:
        states = "; ".join(f"rank {r} {exc.states.get(r, '')}" for r in exc.ranks)
        raise RuntimeError(
            f"the ranks wait for one another (stopped after {exc.after_s:.0f} s): {states}. "
            "Every receive needs a matching send on the rank it names; with blocking "
            "send/recv where every rank sends first, post receives with dist.irecv and "
            "sends with dist.isend, then wait on both") from None
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
