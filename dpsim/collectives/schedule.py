"""Every collective algorithm as rounds of messages, and its simulated time and traffic.

A round is a set of messages sent at the same time. In the alpha-beta model a rank has
one send and one receive port, so a round lasts alpha + (most bytes one rank sends or
receives in it) / B. Summing rounds gives the simulated time, which the tests compare
with the closed forms of `dpsim.collectives.cost`; summing messages gives bytes per rank.
Root is rank 0; chunk sizes follow `dpsim.collectives.ring.chunk_bounds` (differ by at most 1 byte).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsim.collectives.ring import chunk_bounds
from dpsim.hardware import Link
from dpsim.validation import require_choice, require_int

_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter",
                "gather")
_ALGORITHMS = ("ring", "tree", "naive")


@dataclass(frozen=True)
class Round:
    """Messages sent at the same time: src[i] sends nbytes[i] bytes to dst[i]."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    phase: str  # which part of the algorithm, e.g. "reduce_scatter", "broadcast"


def _round(src: list[int] | np.ndarray, dst: list[int] | np.ndarray,
           nbytes: list[int] | np.ndarray, phase: str) -> Round:
    return Round(np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
                 np.asarray(nbytes, dtype=np.int64), phase)


def _sizes(nbytes: int, n: int) -> np.ndarray:
    return np.array([b - a for a, b in chunk_bounds(nbytes, n)], dtype=np.int64)


# --- ring ---------------------------------------------------------------------------------
def _ring_phase(sizes: np.ndarray, offset: int, phase: str) -> list[Round]:
    n = len(sizes)
    src = np.arange(n)
    return [_round(src, (src + 1) % n, sizes[(src - offset - t) % n], phase)
            for t in range(n - 1)]


def _ring_chain(sizes: np.ndarray, toward_root: bool, phase: str) -> list[Round]:
    """Pipeline N chunks along 0 -> 1 -> ... -> N-1 (or back toward 0): 2(N-1) rounds."""
    n = len(sizes)
    rounds = []
    for j in range(2 * n - 2):
        hops = [h for h in range(n - 1) if 0 <= j - h < n]
        if toward_root:
            src, dst = [n - 1 - h for h in hops], [n - 2 - h for h in hops]
        else:
            src, dst = hops, [h + 1 for h in hops]
        rounds.append(_round(src, dst, [sizes[j - h] for h in hops], phase))
    return rounds


def _ring_scatter(sizes: np.ndarray, phase: str, reverse: bool) -> list[Round]:
    """Root sends the farthest rank's chunk first; each rank forwards what is not its own."""
    n = len(sizes)
    rounds = []
    for j in range(n - 1):
        hops = list(range(j + 1))
        owners = [n - 1 - j + h for h in hops]
        if reverse:  # gather: time-reversed scatter, messages flow back toward rank 0
            rounds.append(_round([h + 1 for h in hops], hops, sizes[owners], phase))
        else:
            rounds.append(_round(hops, [h + 1 for h in hops], sizes[owners], phase))
    return rounds[::-1] if reverse else rounds


# --- tree (binomial, rooted at rank 0) ----------------------------------------------------
def _tree_down(n: int, payload: np.ndarray | int, phase: str, split: bool) -> list[Round]:
    """Broadcast (full payload) or scatter (split=True: each subtree's chunks) from rank 0."""
    levels = (n - 1).bit_length()
    rounds = []
    for k in reversed(range(levels)) if split else range(levels):
        step = 1 << k
        srcs = [r for r in range(0, n, 2 * step) if r + step < n] if split else [
            r for r in range(min(step, n)) if r + step < n]
        dsts = [r + step for r in srcs]
        if split:
            assert isinstance(payload, np.ndarray)
            nb = [int(payload[d:min(d + step, n)].sum()) for d in dsts]
        else:
            nb = [int(payload)] * len(srcs)
        rounds.append(_round(srcs, dsts, nb, phase))
    return rounds


def _tree_up(n: int, payload: np.ndarray | int, phase: str, merge: bool) -> list[Round]:
    """Reduce (full payload) or gather (merge=True: subtree chunks) into rank 0."""
    levels = (n - 1).bit_length()
    rounds = []
    for k in range(levels):
        step = 1 << k
        srcs = list(range(step, n, 2 * step))
        if merge:
            assert isinstance(payload, np.ndarray)
            nb = [int(payload[s:min(s + step, n)].sum()) for s in srcs]
        else:
            nb = [int(payload)] * len(srcs)
        rounds.append(_round(srcs, [s - step for s in srcs], nb, phase))
    return rounds


# --- naive (everyone talks to rank 0) -----------------------------------------------------
def _naive_in(n: int, nb: np.ndarray, phase: str) -> list[Round]:
    others = np.arange(1, n)
    return [_round(others, np.zeros(n - 1, dtype=np.int64), nb[others], phase)]


def _naive_out(n: int, nb: np.ndarray, phase: str) -> list[Round]:
    others = np.arange(1, n)
    return [_round(np.zeros(n - 1, dtype=np.int64), others, nb[others], phase)]


def schedule(collective: str, nbytes: int, world_size: int, algorithm: str = "ring"
             ) -> list[Round]:
    """The rounds of messages of one collective on `nbytes` (full tensor) over N ranks."""
    require_choice("collective", collective, _COLLECTIVES)
    require_choice("algorithm", algorithm, _ALGORITHMS)
    require_int("nbytes", nbytes, 0)
    n = require_int("world_size", world_size, 1)
    if n == 1:
        return []
    sizes = _sizes(nbytes, n)
    full = np.full(n, nbytes, dtype=np.int64)
    if algorithm == "ring":
        return {
            "all_reduce": lambda: _ring_phase(sizes, 1, "reduce_scatter")
            + _ring_phase(sizes, 0, "all_gather"),
            "reduce_scatter": lambda: _ring_phase(sizes, 1, "reduce_scatter"),
            "all_gather": lambda: _ring_phase(sizes, 0, "all_gather"),
            "broadcast": lambda: _ring_chain(sizes, False, "broadcast"),
            "reduce": lambda: _ring_chain(sizes, True, "reduce"),
            "scatter": lambda: _ring_scatter(sizes, "scatter", reverse=False),
            "gather": lambda: _ring_scatter(sizes, "gather", reverse=True),
        }[collective]()
    if algorithm == "tree":
        return {
            "all_reduce": lambda: _tree_up(n, nbytes, "reduce", False)
            + _tree_down(n, nbytes, "broadcast", False),
            "all_gather": lambda: _tree_up(n, sizes, "gather", True)
            + _tree_down(n, nbytes, "broadcast", False),
            "reduce_scatter": lambda: _tree_up(n, nbytes, "reduce", False)
            + _tree_down(n, sizes, "scatter", True),
            "broadcast": lambda: _tree_down(n, nbytes, "broadcast", False),
            "reduce": lambda: _tree_up(n, nbytes, "reduce", False),
            "scatter": lambda: _tree_down(n, sizes, "scatter", True),
            "gather": lambda: _tree_up(n, sizes, "gather", True),
        }[collective]()
    return {
        "all_reduce": lambda: _naive_in(n, full, "reduce") + _naive_out(n, full, "broadcast"),
        "all_gather": lambda: _naive_in(n, sizes, "gather") + _naive_out(n, full, "broadcast"),
        "reduce_scatter": lambda: _naive_in(n, full, "reduce") + _naive_out(n, sizes, "scatter"),
        "broadcast": lambda: _naive_out(n, full, "broadcast"),
        "reduce": lambda: _naive_in(n, full, "reduce"),
        "scatter": lambda: _naive_out(n, sizes, "scatter"),
        "gather": lambda: _naive_in(n, sizes, "gather"),
    }[collective]()


def round_time_s(rnd: Round, world_size: int, link: Link) -> float:
    """alpha + the most bytes any one rank sends or receives in this round, over B."""
    sent = np.bincount(rnd.src, weights=rnd.nbytes, minlength=world_size)
    received = np.bincount(rnd.dst, weights=rnd.nbytes, minlength=world_size)
    busiest = max(float(sent.max(initial=0)), float(received.max(initial=0)))
    return link.latency_us * 1e-6 + busiest / (link.bandwidth_GBps * 1e9)


def simulated_time_s(rounds: list[Round], world_size: int, link: Link) -> float:
    """Seconds for a schedule: the sum of its rounds' times."""
    return sum(round_time_s(r, world_size, link) for r in rounds)


def traffic_per_rank(rounds: list[Round], world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes sent, bytes received) per rank over a whole schedule, as int64 arrays."""
    sent = np.zeros(world_size, dtype=np.int64)
    received = np.zeros(world_size, dtype=np.int64)
    for r in rounds:
        np.add.at(sent, r.src, r.nbytes)
        np.add.at(received, r.dst, r.nbytes)
    return sent, received
