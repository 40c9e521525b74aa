"""Chapter 2 exercises: collectives from point-to-point messages.

2.1 bytes each rank sends in a ring and in a naive all-reduce (answers from
    `dpsim.sim.collectives.cost.bytes_sent_per_rank`); 2.2 the ring's reduce-scatter on simulated
    ranks, step by step (answers from `dpsim.sim.collectives.ring.ring_all_reduce_steps`; the
    input arrays must come back unchanged). 2.3 to 2.7 run the learner's function on 2, 3
    or 4 real gloo ranks (`ch02_ranks.run_on_ranks`, every message counted): a ring all-reduce,
    a ring all-gather, a ring reduce-scatter, a pipelined ring all-reduce (chunks cut in
    segments) and a binomial-tree broadcast; results are compared with what torch computes
    from the same data here, and the messages with the algorithm's pattern
    (`ch02_p2p_answers`).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dpsim.course.exercises.ch02_p2p_answers import (
    expected_answer,
    ring_explain,
    slips,
    with_schedules,
)
from dpsim.course.exercises.ch02_ranks import run_on_ranks
from dpsim.course.grading.registry import Case, exercise
from dpsim.sim import bytes_sent_per_rank, chunk_bounds, ring_all_reduce_steps

BYTES_SENT = "dpsim.sim.collectives.cost.bytes_sent_per_rank"
STEPS = "dpsim.sim.collectives.ring.ring_all_reduce_steps"

# --- 2.1 ----------------------------------------------------------------------------------


@exercise("2.1", function="all_reduce_bytes_sent", title="Bytes sent: ring vs naive",
          points=1, forbidden=(BYTES_SENT,))
def _bytes_sent_cases(rng: random.Random) -> Iterator[Case]:
    for algorithm in ("ring", "naive", "ring", "naive", "ring"):
        # the naive scheme on 2 ranks sends [S, S] either way: "the sum back once" and "the
        # ring's per-rank formula" give the same bytes, so naive cases have at least 3 ranks
        n = rng.randint(2 if algorithm == "ring" else 3, 16)
        nbytes = n * 4 * rng.randint(1, 2**18)  # whole float32 elements per chunk
        s = nbytes
        expected = bytes_sent_per_rank("all_reduce", nbytes, n, algorithm)
        half = (n - 1) * s // n
        mistakes: dict[str, Any] = {
            "you counted only the reduce-scatter half; the all-gather sends as much again":
                [half] * n,
            "every rank sends a chunk of S/N at each of 2(N-1) steps: 2(N-1)/N * S, not "
            "2(N-1) * S": [2 * (n - 1) * s] * n,
            "each phase has N-1 steps, not N: after N-1 steps every chunk has visited every "
            "rank": [2 * s] * n,
        }
        if algorithm == "naive":
            mistakes = {
                "rank 0 sends the sum back to each of the other N-1 ranks, not once":
                    [s] * n,
                "you counted what rank 0 receives as well as what it sends":
                    [2 * (n - 1) * s] + [s] * (n - 1),
                "the other ranks send their whole tensor to rank 0 first":
                    [(n - 1) * s] + [0] * (n - 1),
                "in the naive scheme only rank 0 sends to everyone; the ring's 2(N-1)/N * S "
                "is per rank of a ring": [2 * half] * n,
            }
        yield Case(f"nbytes={nbytes}, world_size={n}, algorithm={algorithm!r}",
                   args=(nbytes, n, algorithm), expected=expected, mistakes=mistakes)


# --- 2.2 ----------------------------------------------------------------------------------


def _rs_variant(arrays: list[np.ndarray], direction: int, copies: bool
                ) -> list[list[np.ndarray]]:
    """A reduce-scatter with one of the usual slips, to recognise the learner's mistake."""
    n = len(arrays)
    bufs = [a.copy() for a in arrays]
    bounds = chunk_bounds(len(arrays[0]), n)
    out: list[list[np.ndarray]] = []
    for t in range(n - 1):
        sends = [(r, (r + direction) % n, (r - 1 - t) % n) for r in range(n)]
        payload = {r: bufs[r][slice(*bounds[c])].copy() for r, _, c in sends}
        for r, dst, c in sends:
            bufs[dst][slice(*bounds[c])] += payload[r]
        out.append([b.copy() for b in bufs] if copies else bufs)
    return [[b.copy() for b in step] for step in out]


def _rs_shifted(arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Rank r sends chunk (r - t) instead of (r - 1 - t): an off-by-one in the schedule."""
    n = len(arrays)
    bufs = [a.copy() for a in arrays]
    bounds = chunk_bounds(len(arrays[0]), n)
    out = []
    for t in range(n - 1):
        payload = [bufs[r][slice(*bounds[(r - t) % n])].copy() for r in range(n)]
        for r in range(n):
            bufs[(r + 1) % n][slice(*bounds[(r - t) % n])] += payload[r]
        out.append([b.copy() for b in bufs])
    return out


@exercise("2.2", function="reduce_scatter_steps", title="Reduce-scatter on simulated ranks",
          points=2, forbidden=(STEPS,))
def _reduce_scatter_cases(rng: random.Random) -> Iterator[Case]:
    for n, length in ((3, 6), (4, rng.randint(9, 15)), (2, 5), (5, 3), (4, rng.randint(20, 40))):
        arrays = [np.array([rng.randint(-9, 9) for _ in range(length)]) for _ in range(n)]
        steps = ring_all_reduce_steps(arrays)[1:n]
        expected = [[b.copy() for b in s.buffers] for s in steps]
        mistakes = {
            "each rank sends to its right neighbour, rank (r + 1) % N":
                _rs_variant(arrays, -1, True),
            "every step in your list shows the final state: append copies of the arrays, "
            "not the arrays themselves": _rs_variant(arrays, 1, False),
            "at step t rank r sends chunk (r - 1 - t) % N; your chunks look shifted":
                _rs_shifted(arrays),
        }
        label = f"world_size={n}, length={length}, arrays={[a.tolist() for a in arrays]}"
        listed = [[[int(v) for v in b] for b in step] for step in expected]
        answer = {"steps": listed, "inputs_unchanged": True}
        hints = {h: {"steps": [[[int(v) for v in b] for b in s] for s in wrong],
                     "inputs_unchanged": True} for h, wrong in mistakes.items()}
        hints["the reduce-scatter has N-1 steps (t = 0 .. N-2); your list has one step "
              "fewer"] = {"steps": listed[:-1], "inputs_unchanged": True}
        hints[MUTATED] = {"steps": listed, "inputs_unchanged": False}
        yield Case(label, args=([a.tolist() for a in arrays],), expected=answer,
                   mistakes=hints, call=STEPS_RUNNER, explain=_explain_steps)


MUTATED = ("you changed the input arrays; copy them first (np.array(a, copy=True)) and work "
           "on the copies")


def _explain_steps(answer: Any) -> str | None:
    """Input arrays changed, whatever the steps (they are often wrong as well then)."""
    if isinstance(answer, dict) and answer.get("inputs_unchanged") is False:
        return f"looks like {MUTATED}"
    return None


def _plain_steps(steps: Any) -> Any:
    """The learner's steps as nested lists of ints (anything else as it is)."""
    try:
        return [[[int(v) for v in np.asarray(b).reshape(-1)] for b in step] for step in steps]
    except (TypeError, ValueError):
        return steps


def run_steps(fn: Callable[..., Any], arrays: list[list[int]]) -> dict[str, Any] | None:
    """Call fn on numpy copies of `arrays`; its steps as lists, and whether the inputs came
    back unchanged."""
    given = [np.array(a, dtype=np.int64) for a in arrays]
    steps = fn(given)
    if steps is None:
        return None
    return {"steps": _plain_steps(steps),
            "inputs_unchanged": all(np.array_equal(g, np.array(a)) for g, a in
                                    zip(given, arrays, strict=True))}


STEPS_RUNNER: Callable[..., Any] = run_steps  # Case.call: call(fn, *args)


# --- 2.3 to 2.7: on real gloo ranks --------------------------------------------------------


# Case.call takes a runner by its own signature, call(fn, *args)
RANKS_RUNNER: Callable[..., Any] = run_on_ranks


def _ranks_case(kind: str, n: int, items: list[dict[str, Any]], what: str) -> Case:
    """One launch of n gloo ranks running the learner's function on every item."""
    expected = expected_answer(kind, n, items)
    return Case(f"{n} gloo ranks; {what}", args=(kind, n, with_schedules(kind, n, items)),
                expected=expected,
                mistakes=slips(kind, n, items), call=RANKS_RUNNER,
                explain=functools.partial(ring_explain, kind, expected))


def _lengths(items: list[dict[str, Any]]) -> str:
    return ", ".join(str(it["length"]) for it in items)


@exercise("2.3", function="ring_all_reduce", title="A ring all-reduce over send/recv",
          points=3, forbidden=("dpsim.runtime.collective_workers.ring_all_reduce_",))
def _ring_cases(rng: random.Random) -> Iterator[Case]:
    for n in (3, 2):
        lengths = [n - 1, rng.randint(n + 1, 4 * n), n * rng.randint(2, 3)]
        items = [{"seed": rng.randint(0, 10**6), "length": k} for k in lengths]
        yield _ranks_case("all_reduce", n, items, f"tensors of {_lengths(items)} element(s) "
                          "(whole numbers in float32; the shortest leaves some chunks empty)")


@exercise("2.4", function="ring_all_gather", title="A ring all-gather over send/recv",
          points=2)
def _all_gather_cases(rng: random.Random) -> Iterator[Case]:
    for n in (2, 3):
        items = [{"seed": rng.randint(0, 10**6), "length": k}
                 for k in (1, rng.randint(2, 6))]
        yield _ranks_case("all_gather", n, items,
                          f"every rank gives a tensor of {_lengths(items)} element(s)")


@exercise("2.5", function="ring_reduce_scatter", title="A ring reduce-scatter over send/recv",
          points=2)
def _reduce_scatter_ranks_cases(rng: random.Random) -> Iterator[Case]:
    for n in (3, 2):
        lengths = [n - 1, rng.randint(n + 1, 4 * n)]
        items = [{"seed": rng.randint(0, 10**6), "length": k} for k in lengths]
        yield _ranks_case("reduce_scatter", n, items, f"tensors of {_lengths(items)} "
                          "element(s) (the shortest leaves some chunks empty)")


@exercise("2.6", function="pipelined_ring_all_reduce", title="A pipelined ring all-reduce",
          points=2, forbidden=("dpsim.runtime.collective_workers.ring_all_reduce_",))
def _pipelined_cases(rng: random.Random) -> Iterator[Case]:
    for n in (2, 3):
        items = []
        for k in (2, rng.randint(3, 4)):
            items.append({"seed": rng.randint(0, 10**6), "n_segments": k,
                          "length": n * k + rng.randint(0, 2 * n * k)})
        what = "; ".join(f"{it['length']} elements in {it['n_segments']} segments per chunk"
                         for it in items)
        yield _ranks_case("pipelined", n, items, what)


@exercise("2.7", function="tree_broadcast", title="A binomial-tree broadcast", points=2)
def _broadcast_cases(rng: random.Random) -> Iterator[Case]:
    for n in (4, 3):
        roots = [rng.randint(1, n - 1), rng.randint(0, n - 1)]
        items = [{"seed": rng.randint(0, 10**6), "length": rng.randint(1, 5), "root": root}
                 for root in roots]
        what = ", ".join(f"root {it['root']} ({it['length']} elements)" for it in items)
        yield _ranks_case("broadcast", n, items, what)
