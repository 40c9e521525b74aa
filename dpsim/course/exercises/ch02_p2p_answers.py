"""The expected answers of chapter 2's exercises on real ranks, and their usual slips.

Every answer is computed here, in the grading process, from the same `ch02_ranks.rank_data` the
ranks use: the results by torch itself (`torch.cat`, a sum, `tensor_split`), the message
pattern from the algorithm's definition (a ring sends to rank + 1 and receives from rank -
1; a binomial tree doubles the ranks that hold the data every round). `slips` gives, for
one case, the answers that common mistakes produce (hint -> answer), so a wrong answer is
named, never the expected one shown.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from dpsim.course.exercises.ch02_ranks import (
    FIELDS,
    FORBIDDEN,
    RINGS,
    first_wrong_chunk,
    rank_data,
)
from dpsim.sim import chunk_bounds

NO_MESSAGES = ("no message went through dist.isend / dist.irecv (or dist.send / dist.recv, "
               "dist.batch_isend_irecv): the exercise is to move the data with them yourself")

# the collective of torch each kind's mistakes name (the one that answers it outright)
COLLECTIVE_OF = {"all_gather": "all_gather_into_tensor", "reduce_scatter":
                 "reduce_scatter_tensor", "broadcast": "broadcast", "all_reduce": "all_reduce",
                 "pipelined": "all_reduce"}


def binomial_tree(n: int, root: int) -> tuple[list[list[int]], list[list[int]]]:
    """(sent_to, received_from) per rank of a binomial broadcast from `root`.

    Round k = 0, 1, ...: every rank whose rank relative to the root, rel = (rank - root)
    % n, is below 2**k sends to relative rank rel + 2**k (if that is below n).
    """
    sent: list[list[int]] = [[] for _ in range(n)]
    received: list[list[int]] = [[] for _ in range(n)]
    mask = 1
    while mask < n:
        for rel in range(min(mask, n - mask)):
            src, dst = (rel + root) % n, (rel + mask + root) % n
            sent[src].append(dst)
            received[dst].append(src)
        mask *= 2
    return sent, received


def ring_run(arrays: list[torch.Tensor], gather: bool = True, add_in_gather: bool = False,
             shift: int = 1) -> tuple[list[torch.Tensor], list[list[list[float]]]]:
    """The ring of 2.3 step by step, as the exercise describes it: every rank's tensor at
    the end, and what each rank sent, message by message. At step t of the reduce-scatter
    rank r sends chunk (r - shift - t) % n to rank r + 1, which adds it into its own (shift
    1 is right, 0 the usual slip); the all-gather (`gather`) goes on with the same schedule
    and puts the arriving chunk in place (or adds it: `add_in_gather`, a slip)."""
    n = len(arrays)
    bufs = [a.clone() for a in arrays]
    bounds = chunk_bounds(len(arrays[0]), n)
    sent: list[list[list[float]]] = [[] for _ in range(n)]
    phases = [(True, t) for t in range(n - 1)]
    if gather:
        phases += [(add_in_gather, n - 1 + t) for t in range(n - 1)]
    for add, step in phases:
        chunk = [(r - shift - step) % n for r in range(n)]
        payload = [bufs[r][slice(*bounds[chunk[r]])].clone() for r in range(n)]
        for r in range(n):
            sent[r].append(payload[r].tolist())
            target = bufs[(r + 1) % n][slice(*bounds[chunk[r]])]
            if add:
                target += payload[r]
            else:
                target.copy_(payload[r])
    return bufs, sent


def ring_sends(kind: str, arrays: list[torch.Tensor]) -> list[list[list[float]]]:
    """What each rank sends, message by message, in the exercise's ring of `kind` (2.3's
    all-reduce, 2.5's reduce-scatter: `ring_run`; 2.4's all-gather: at step t rank r sends
    piece (r - t) % n, rank r - t's tensor)."""
    n = len(arrays)
    if kind == "all_gather":
        return [[arrays[(r - t) % n].tolist() for t in range(n - 1)] for r in range(n)]
    return ring_run(arrays, gather=kind == "all_reduce")[1]


def with_schedules(kind: str, n: int, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`items` with, for a ring, what each rank must send message by message ("schedule":
    rank -> messages), so the ranks judge the chunks without holding the rule that picks
    them."""
    if kind not in RINGS:
        return items
    return [{**it, "schedule": ring_sends(kind, [rank_data(it["seed"], r, it["length"])
                                                  for r in range(n)])} for it in items]


def ring_final(arrays: list[torch.Tensor], gather: bool = True, add_in_gather: bool = False,
               shift: int = 1) -> list[list[float]]:
    """Every rank's tensor after the ring of 2.3 (optionally without, or adding in, the
    all-gather), computed step by step as the exercise describes it (`ring_run`)."""
    return [b.tolist() for b in ring_run(arrays, gather, add_in_gather, shift)[0]]


def ring_wrong_chunks(kind: str, arrays: list[torch.Tensor], **slip: Any) -> list[int]:
    """Per rank, the first message of the ring slip `slip` (`ring_run`'s keywords) that
    carries another chunk than the exercise's schedule (-1: none)."""
    sent = ring_run(arrays, gather=kind == "all_reduce", **slip)[1]
    return [first_wrong_chunk(mine, schedule)
            for mine, schedule in zip(sent, ring_sends(kind, arrays), strict=True)]


RINGS_OF_PIECES = ("all_gather", "all_reduce")  # kinds where sending to all is the usual slip
WRONG_CHUNK = {
    "all_reduce": "at step t of the reduce-scatter rank r sends chunk (r - 1 - t) mod N "
                  "(and (r - t) mod N in the all-gather), one chunk per message",
    "reduce_scatter": "at step t rank r sends chunk (r - 1 - t) mod N, one chunk per message",
    "all_gather": "at step t rank r sends piece (r - t) mod N (rank r - t's tensor), one "
                  "piece per message"}


def wrong_chunk_hint(kind: str) -> str:
    """The hint for a ring whose sums come out right from other messages than the schedule's."""
    return (f"your result is right, but not from the exercise's ring: {WRONG_CHUNK[kind]}; "
            "a message of yours carried something else (another chunk, or more than one)")


ALL_TO_ALL = ("every rank sent to every other rank (an all-to-all: N-1 messages, one to each "
              "peer); in a ring each rank sends only to its right neighbour (rank + 1) % N and "
              "receives only from its left one (rank - 1) % N, passing on what arrived")
WHOLE_TENSORS = ("your ring passed whole tensors round (N-1 messages of the whole tensor "
                 "each); the ring all-reduce cuts the tensor into N chunks and sends one chunk "
                 "per message: N-1 steps of reduce-scatter, then N-1 of all-gather")
LINEAR = ("the root sends to every rank itself (a linear broadcast: N-1 sends in a row from "
          "one rank); in a binomial tree every rank that has the data sends on, so it takes "
          "ceil(log2 N) rounds")


def _peer_lists(answer: dict[str, Any], expected: dict[str, Any]
                ) -> list[list[list[int]]] | None:
    """The answer's `sent_to` (item -> rank -> peers) when it has the expected shape."""
    sent, want = answer.get("sent_to"), expected["sent_to"]
    if not (isinstance(sent, list) and len(sent) == len(want) and all(
            isinstance(item, list) and len(item) == len(w)
            and all(isinstance(peers, list) and all(type(q) is int for q in peers)
                    for peers in item)
            for item, w in zip(sent, want, strict=True))):
        return None
    return sent


def _all_to_all(answer: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """ALL_TO_ALL when every rank sent once to each other rank, in any order (on 2 ranks
    an all-to-all is a ring's pattern: not told apart)."""
    sent = _peer_lists(answer, expected)
    if sent is None or len(sent[0]) <= 2:
        return None
    n = len(sent[0])
    if all(sorted(peers) == [q for q in range(n) if q != rank]
           for item in sent for rank, peers in enumerate(item)):
        return ALL_TO_ALL
    return None


def _linear(answer: dict[str, Any], expected: dict[str, Any]) -> str | None:
    """LINEAR when the root alone sent, once to each other rank, in any order."""
    sent = _peer_lists(answer, expected)
    if sent is None or len(sent[0]) <= 2:
        return None
    n = len(sent[0])
    for item, received in zip(sent, expected["received_from"], strict=True):
        root = next(r for r in range(n) if not received[r])  # the tree's root receives none
        if not all(sorted(peers) == [q for q in range(n) if q != root] if rank == root
                   else peers == [] for rank, peers in enumerate(item)):
            return None
    return LINEAR


def ring_explain(kind: str, expected: dict[str, Any], answer: Any) -> str | None:
    """A case's grader-side hint (`Case.explain`): another collective called
    (`other_collectives`), an all-to-all or a linear broadcast (in any order of messages),
    or the right result from other messages than the schedule's."""
    other = other_collectives(kind, answer)
    if other is None and isinstance(answer, dict):
        other = (_linear if kind == "broadcast" else _all_to_all)(answer, expected)
        other = None if other is None else f"looks like {other}"
    if other is not None or kind not in WRONG_CHUNK or not isinstance(answer, dict):
        return other
    wrong = answer.get("wrong_chunk")
    rest = {k: v for k, v in answer.items() if k != "wrong_chunk"}
    if (isinstance(wrong, list) and wrong != expected["wrong_chunk"]
            and rest == {k: v for k, v in expected.items() if k != "wrong_chunk"}):
        return wrong_chunk_hint(kind)
    return None


def _ring_pattern(n: int, steps: int) -> tuple[list[list[int]], list[list[int]]]:
    return ([[(r + 1) % n] * steps for r in range(n)],
            [[(r - 1) % n] * steps for r in range(n)])


def _item_answer(kind: str, n: int, item: dict[str, Any]) -> dict[str, Any]:
    data = [rank_data(item["seed"], r, item["length"]) for r in range(n)]
    total = torch.stack(data).sum(0)
    steps = n - 1 if kind in ("all_gather", "reduce_scatter") else 2 * (n - 1)
    if kind == "pipelined":
        steps *= item["n_segments"]
    sent, received = _ring_pattern(n, steps)
    if kind == "all_gather":
        result = [torch.cat(data).tolist()] * n
    elif kind == "reduce_scatter":
        result = [c.tolist() for c in total.tensor_split(n)]
    elif kind == "broadcast":
        result = [data[item["root"]].tolist()] * n
        sent, received = binomial_tree(n, item["root"])
    else:
        result = [total.tolist()] * n
    largest = max(s.numel() for s in total.tensor_split(n)[0].tensor_split(
        item.get("n_segments", 1)))
    return {"result": result, "unchanged": [True] * n, "sent_to": sent,
            "received_from": received, "largest_send": [largest] * n,
            "forwards_early": [True] * n, "wrong_chunk": [-1] * n}


def expected_answer(kind: str, n: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    """What `ch02_ranks.run_on_ranks(fn, kind, n, items)` returns for a right `fn`."""
    per_item = [_item_answer(kind, n, item) for item in items]
    out: dict[str, Any] = {f: [a[f] for a in per_item] for f in FIELDS[kind]}
    out["collectives"] = []
    return out


def other_collectives(kind: str, answer: Any) -> str | None:
    """The hint for an answer that called a collective of torch other than the one its
    mistakes name (`dist.all_gather` in a ring all-gather, an all-reduce in a broadcast):
    None for any other answer (the mistakes then name it)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("collectives"), list):
        return None
    named = {COLLECTIVE_OF[kind], *FORBIDDEN.get(kind, ())}
    others = [c for c in answer["collectives"] if isinstance(c, str) and c not in named]
    if not others:
        return None
    called = ", ".join(f"dist.{c}" for c in others)
    return (f"you called {called} (imported or not, or a functional form of it: it is "
            "noticed); the exercise is to move the data yourself with dist.isend and "
            "dist.irecv only")


def _with(expected: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(expected)
    out.update(fields)
    return out


def _common(kind: str, n: int, expected: dict[str, Any], items: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """Slips every kind shares: a collective instead of messages, uncounted messages."""
    silent: list[list[list[int]]] = [[[] for _ in range(n)] for _ in expected["result"]]
    collective = COLLECTIVE_OF[kind]
    out: dict[str, Any] = {
        NO_MESSAGES: _with(expected, sent_to=silent, received_from=silent),
        f"you called dist.{collective} (or a functional form of it, "
        "torch.distributed._functional_collectives or torch.distributed.nn.functional); the "
        "exercise is to build it from dist.isend and dist.irecv": _with(
            expected, sent_to=silent, received_from=silent, collectives=[collective]),
        f"you called dist.{collective} (imported or not, or a functional form of it: it is "
        "noticed): the messages you sent beside it do not make it yours; build it from "
        "dist.isend and dist.irecv only": _with(expected, collectives=[collective]),
    }
    for name in FORBIDDEN.get(kind, ()):
        own = [[rank_data(it["seed"], r, it["length"]).tolist() for r in range(n)]
               for it in items]
        out[f"the exercise asks you to write it yourself, not to call {name}"] = _with(
            expected, result=own, sent_to=silent, received_from=silent, collectives=[name])
    if kind != "broadcast":
        out["each rank sends to its right neighbour (rank + 1) % N and receives from its "
            "left one (rank - 1) % N; yours go the other way"] = _with(
            expected, sent_to=expected["received_from"], received_from=expected["sent_to"])
    return out


def slips(kind: str, n: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Hint -> the answer that mistake gives, for this case (see the module doc)."""
    expected = expected_answer(kind, n, items)
    out = _common(kind, n, expected, items)
    datas = [[rank_data(it["seed"], r, it["length"]) for r in range(n)] for it in items]
    if kind in ("all_gather", "reduce_scatter"):
        out["you changed the input tensor; leave it as it is (work on a copy, e.g. "
            "tensor.clone())"] = _with(expected, unchanged=[[False] * n for _ in items])
        out[f"a ring needs N-1 = {n - 1} steps; your ranks sent one message more"] = _with(
            expected, sent_to=[[s + s[:1] for s in it] for it in expected["sent_to"]],
            received_from=[[s + s[:1] for s in it] for it in expected["received_from"]])
    if kind in RINGS_OF_PIECES and n > 2:  # each rank's piece straight to every other rank
        peers = [[(r + k) % n for k in range(1, n)] for r in range(n)]
        senders = [[(r - k) % n for k in range(1, n)] for r in range(n)]
        out[ALL_TO_ALL] = _with(expected, sent_to=[peers for _ in items],
                                received_from=[senders for _ in items],
                                wrong_chunk=[[-1] * n for _ in items])
    if kind == "all_reduce":  # whole tensors round the ring: N-1 messages, the sum right
        out[WHOLE_TENSORS] = _with(
            expected, sent_to=[[s[: len(s) // 2] for s in it] for it in expected["sent_to"]],
            received_from=[[s[: len(s) // 2] for s in it] for it in expected["received_from"]])
    if kind in WRONG_CHUNK:  # every rank's first message off the schedule: a shifted ring
        out[wrong_chunk_hint(kind)] = _with(expected, wrong_chunk=[[0] * n for _ in items])
    if kind == "all_gather":
        out["rank q's tensor belongs at position q of the result (rank order), not in the "
            "order the pieces arrived"] = _with(expected, result=[
                [torch.cat([d[(r - k) % n] for k in range(n)]).tolist() for r in range(n)]
                for d in datas])
    if kind == "reduce_scatter":
        shifted = []
        for it, d in zip(items, datas, strict=True):
            final = ring_final(d, gather=False, shift=0)
            bounds = chunk_bounds(it["length"], n)
            shifted.append([final[r][slice(*bounds[r])] for r in range(n)])
        out["rank r must end with the sum of chunk r: at step t it sends chunk "
            "(r - 1 - t) % N; your chunks look shifted by one"] = _with(
            expected, result=shifted,
            wrong_chunk=[ring_wrong_chunks(kind, d, shift=0) for d in datas])
    if kind == "all_reduce":
        out["the all-gather phase is missing: after the reduce-scatter each rank owns one "
            "summed chunk; N-1 more steps pass the finished chunks around"] = _with(
            expected, result=[ring_final(d, gather=False) for d in datas],
            sent_to=[[s[: len(s) // 2] for s in it] for it in expected["sent_to"]],
            received_from=[[s[: len(s) // 2] for s in it] for it in expected["received_from"]])
        out["in the all-gather phase, put the arriving (finished) chunk in place (irecv "
            "straight into the chunk); adding it to your partial sum counts some ranks "
            "twice"] = _with(expected, result=[ring_final(d, add_in_gather=True)
                                               for d in datas],
                             wrong_chunk=[ring_wrong_chunks(kind, d, add_in_gather=True)
                                          for d in datas])
        out["sum into the tensor you were given, in place (tensor.tensor_split(N) gives views "
            "of it): the caller's tensor came back unchanged, and what your function returns "
            "is not looked at"] = _with(expected, result=[[x.tolist() for x in d] for d in datas])
    if kind == "pipelined":
        out["each chunk went in one message: cut every chunk into n_segments segments "
            "(chunk.tensor_split(n_segments)) and send them one by one"] = _with(
            expected, sent_to=[[s[: len(s) // it["n_segments"]] for s in sent]
                               for sent, it in zip(expected["sent_to"], items, strict=True)],
            received_from=[[s[: len(s) // it["n_segments"]] for s in rec] for rec, it in
                           zip(expected["received_from"], items, strict=True)],
            largest_send=[[max(s.numel() for s in torch.stack(d).sum(0).tensor_split(n)[:1])]
                          * n for d in datas])
        out["a segment must go on as soon as it arrived, before the rest of its chunk: wait "
            "for one segment, add it, send it, then the next; yours waits for the whole chunk "
            "first (no pipelining)"] = _with(expected,
                                              forwards_early=[[False] * n for _ in items])
    if kind == "broadcast":
        linear_sent = [[[(it["root"] + k) % n for k in range(1, n)] if r == it["root"] else []
                        for r in range(n)] for it in items]
        linear_received = [[[] if r == it["root"] else [it["root"]] for r in range(n)]
                           for it in items]
        out[LINEAR] = _with(expected, sent_to=linear_sent, received_from=linear_received)
        trees = [binomial_tree(n, 0) for _ in items]
        out["count ranks relative to the root, rel = (rank - root) % N: your tree starts at "
            "rank 0 whatever the root"] = _with(
            expected, result=[[d[0].tolist()] * n for d in datas],
            sent_to=[t[0] for t in trees], received_from=[t[1] for t in trees])
    return out
