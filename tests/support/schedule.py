"""Every collective algorithm as rounds of messages, and its simulated time and traffic.

A round is a set of messages sent at the same time. In the alpha-beta model a rank has
one send and one receive port, so a round lasts alpha + (most bytes one rank sends or
receives in it) / B. Summing rounds gives the simulated time, which the tests compare
with the closed forms of `dpsim.sim.collectives.cost`; summing messages gives bytes per rank.
Root is rank 0; chunk sizes follow `dpsim.sim.collectives.ring.chunk_bounds` (differ by at most 1
byte).
A schedule holds every message, N rounds of N messages for the ring, so it takes up to
`limits.MAX_SCHEDULE_RANKS` ranks; `traffic.bytes_per_rank` gives the same bytes per rank
by formula for many more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsim.sim.checks import require_choice, require_int
from dpsim.sim.collectives.domain import ALGORITHMS, COLLECTIVES, finite_seconds
from dpsim.sim.collectives.ring import chunk_sizes
from dpsim.sim.hardware import Link
from dpsim.sim.limits import MAX_LISTED_RANKS, MAX_NBYTES, MAX_SCHEDULE_RANKS

_INT64_MAX = int(np.iinfo(np.int64).max)


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
        hops = np.arange(max(0, j - n + 1), min(j, n - 2) + 1)  # hop h carries chunk j - h
        if toward_root:
            src, dst = n - 1 - hops, n - 2 - hops
        else:
            src, dst = hops, hops + 1
        rounds.append(_round(src, dst, sizes[j - hops], phase))
    return rounds


def _ring_scatter(sizes: np.ndarray, phase: str, reverse: bool) -> list[Round]:
    """Root sends the farthest rank's chunk first; each rank forwards what is not its own."""
    n = len(sizes)
    rounds = []
    for j in range(n - 1):
        hops = np.arange(j + 1)
        owners = n - 1 - j + hops
        if reverse:  # gather: time-reversed scatter, messages flow back toward rank 0
            rounds.append(_round(hops + 1, hops, sizes[owners], phase))
        else:
            rounds.append(_round(hops, hops + 1, sizes[owners], phase))
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


def check_collective(collective: str, nbytes: int, world_size: int, algorithm: str,
                     max_world_size: int) -> None:
    """The oracle's own checks: a known collective and algorithm, nbytes and world_size in
    range (the simulator's face checks its callers' arguments by their hints)."""
    require_choice("collective", collective, COLLECTIVES)
    require_choice("algorithm", algorithm, ALGORITHMS)
    require_int("nbytes", nbytes, 0, MAX_NBYTES)
    require_int("world_size", world_size, 1, max_world_size)


def check_link(link: Link) -> None:
    """A Link (which checks its own numbers)."""
    if not isinstance(link, Link):
        raise ValueError(f"link={link!r} is not a Link; give a dpsim.sim.hardware.Link")


def schedule(collective: str, nbytes: int, world_size: int, algorithm: str = "ring"
             ) -> list[Round]:
    """The rounds of messages of one collective on `nbytes` (full tensor) over N ranks."""
    check_collective(collective, nbytes, world_size, algorithm, MAX_SCHEDULE_RANKS)
    n = int(world_size)
    nbytes = int(nbytes)
    if n == 1:
        return []
    sizes = chunk_sizes(nbytes, n)
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
    n = require_int("world_size", world_size, 1, MAX_LISTED_RANKS)
    check_link(link)
    _check_round("rnd", rnd, n)
    return _round_time_s(rnd, n, link)


def _round_time_s(rnd: Round, world_size: int, link: Link) -> float:
    sent = np.bincount(rnd.src, weights=rnd.nbytes, minlength=world_size)
    received = np.bincount(rnd.dst, weights=rnd.nbytes, minlength=world_size)
    busiest = max(float(sent.max(initial=0)), float(received.max(initial=0)))
    latency_s = link.latency_us * 1e-6
    return finite_seconds(latency_s + busiest / (link.bandwidth_GBps * 1e9), latency_s, link)


def simulated_time_s(rounds: list[Round], world_size: int, link: Link) -> float:
    """Seconds for a schedule: the sum of its rounds' times."""
    n = require_int("world_size", world_size, 1, MAX_LISTED_RANKS)
    check_link(link)
    _check_rounds(rounds, n)
    total = sum(_round_time_s(r, n, link) for r in rounds)
    return finite_seconds(total, link.latency_us * 1e-6 * len(rounds), link)


def traffic_per_rank(rounds: list[Round], world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes sent, bytes received) per rank over a whole schedule, as int64 arrays."""
    n = require_int("world_size", world_size, 1, MAX_LISTED_RANKS)
    _check_rounds(rounds, n)
    sent = np.zeros(n, dtype=np.int64)
    received = np.zeros(n, dtype=np.int64)
    for r in rounds:
        np.add.at(sent, r.src, r.nbytes)
        np.add.at(received, r.dst, r.nbytes)
    return sent, received


def _check_rounds(rounds: list[Round], world_size: int) -> None:
    """Every round well formed, of ranks 0..world_size-1, and all bytes within an int64."""
    if isinstance(rounds, (str, bytes)) or not isinstance(rounds, Sequence):
        raise ValueError(f"rounds={rounds!r} is not a list of Round; give what schedule() "
                         "returns")
    for i, rnd in enumerate(rounds):
        _check_shape(f"rounds[{i}]", rnd)
    if not rounds:
        return
    for name in ("src", "dst", "nbytes"):  # one pass over all rounds; find the culprit after
        every = np.concatenate([getattr(r, name) for r in rounds])
        high = MAX_NBYTES if name == "nbytes" else world_size - 1
        if len(every) and (int(every.min()) < 0 or int(every.max()) > high):
            for i, rnd in enumerate(rounds):
                _check_values(f"rounds[{i}]", rnd, world_size)
    if len(every) * MAX_NBYTES > _INT64_MAX:  # only then can the bytes overflow an int64
        total = sum(int(r.nbytes.sum()) for r in rounds)
        if total > _INT64_MAX:
            raise ValueError(f"rounds=<{len(rounds)} rounds of {total:,} bytes in all> carry "
                             f"too many bytes; allowed at most {_INT64_MAX:,} in all")


def _check_round(field: str, rnd: Round, world_size: int) -> None:
    _check_shape(field, rnd)
    _check_values(field, rnd, world_size)


def _check_shape(field: str, rnd: Round) -> None:
    """A Round of three 1-D integer arrays of one length, at most MAX_LISTED_RANKS long."""
    if not isinstance(rnd, Round):
        raise ValueError(f"{field}={rnd!r} is not a Round; give rounds from schedule()")
    for name in ("src", "dst", "nbytes"):
        a = getattr(rnd, name)
        if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "iu":
            raise ValueError(f"{field}.{name}={a!r} is not a 1-D integer array")
        if len(a) != len(rnd.src):
            raise ValueError(f"len({field}.{name})={len(a)} differs from len({field}.src)="
                             f"{len(rnd.src)}; allowed: one entry per message")
        if len(a) > MAX_LISTED_RANKS:
            raise ValueError(f"len({field}.{name})={len(a)} is out of range; allowed at most "
                             f"{MAX_LISTED_RANKS} messages a round")


def _check_values(field: str, rnd: Round, world_size: int) -> None:
    """Ranks 0..world_size-1 and 0..MAX_NBYTES bytes a message."""
    for name in ("src", "dst", "nbytes"):
        a = getattr(rnd, name)
        high = MAX_NBYTES if name == "nbytes" else world_size - 1
        if len(a) and (int(a.min()) < 0 or int(a.max()) > high):
            k = int(np.flatnonzero((a < 0) | (a > high))[0])
            what = "bytes" if name == "nbytes" else "ranks, world_size - 1 at most"
            raise ValueError(f"{field}.{name}[{k}]={int(a[k])} is out of range; allowed: "
                             f"0 to {high} ({what})")
