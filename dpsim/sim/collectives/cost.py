"""What collectives cost: alpha-beta closed forms, bus bandwidth and bytes per rank.

The alpha-beta model: sending a message of m bytes over a link takes alpha + m / B,
with alpha = `link.latency_us` and B = `link.bandwidth_GBps` (per direction). A rank
sends on one port and receives on another at the same time; a round of simultaneous
messages lasts alpha + (the most bytes one rank sends or receives) / B.

`nbytes` is always the size S of the full, unsharded tensor: the tensor all-reduced,
broadcast or reduced; the concatenation all-gathered or gathered; the input that
reduce-scatter or scatter cut into N = world_size shards of S / N.

Three algorithms (N ranks, L = ceil(log2 N) tree levels, root = rank 0):

| collective     | ring                   | tree (binomial)        | naive (root <-> all)  |
|----------------|------------------------|------------------------|-----------------------|
| all_reduce     | 2(N-1)a + 2(N-1)/N S/B | 2L a + 2L S/B          | 2a + 2(N-1) S/B       |
| all_gather     | (N-1)a + (N-1)/N S/B   | 2L a + (L+(N-1)/N) S/B | 2a + (N-1)(1+1/N) S/B |
| reduce_scatter | (N-1)a + (N-1)/N S/B   | 2L a + (L+(N-1)/N) S/B | 2a + (N-1)(1+1/N) S/B |
| broadcast      | 2(N-1)a + 2(N-1)/N S/B | L a + L S/B            | a + (N-1) S/B         |
| reduce         | 2(N-1)a + 2(N-1)/N S/B | L a + L S/B            | a + (N-1) S/B         |
| scatter        | (N-1)a + (N-1)/N S/B   | L a + (N-1)/N S/B      | a + (N-1)/N S/B       |
| gather         | (N-1)a + (N-1)/N S/B   | L a + (N-1)/N S/B      | a + (N-1)/N S/B       |

Ring broadcast/reduce pipeline N chunks along the chain 0 -> 1 -> ... -> N-1; tree
all-* collectives are a tree into rank 0 followed by a tree out of it; naive ones gather
everything on rank 0 (one round) and send the result out (one round). Reduction
arithmetic is not counted. The tests' oracle, `tests/support/schedule.py`, builds every
algorithm as rounds of messages and checks that its simulated time equals these closed
forms; bytes per rank come by formula from `dpsim.sim.collectives.traffic`, equal to the
schedule's. The
inputs' ranges (ranks, bytes) are in `dpsim.sim.limits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from dpsim.sim.checks import OneOf, Real
from dpsim.sim.collectives.domain import ALGORITHMS, COLLECTIVES, finite_seconds
from dpsim.sim.collectives.ring import RingStep, chunk_bounds, ring_all_reduce_steps
from dpsim.sim.collectives.traffic import bytes_per_rank
from dpsim.sim.hardware import Link
from dpsim.sim.limits import ListedRanks, NBytes, WorldSize

Collective = Annotated[str, OneOf(COLLECTIVES)]
Algorithm = Annotated[str, OneOf(ALGORITHMS)]
Positive = Annotated[float, Real(0, None, low_inclusive=False)]  # a time in seconds, > 0

__all__ = [
    "ALGORITHMS", "COLLECTIVES", "RingStep", "algbw_GBps", "bandwidths_GBps",
    "bus_bandwidth_factor", "busbw_GBps", "bytes_received_per_rank", "bytes_sent_per_rank",
    "chunk_bounds", "collective_time_s", "collective_times_s", "cost_terms",
    "ring_all_reduce_steps", "ring_bytes_per_rank_formula", "tree_levels",
]


def tree_levels(world_size: int) -> int:
    """L = ceil(log2 world_size): rounds of a binomial tree (0 for one rank)."""
    return int(world_size - 1).bit_length()


def cost_terms(collective: Collective, world_size: WorldSize,
               algorithm: Algorithm = "ring") -> tuple[int, float]:
    """(number of alpha terms, multiple of S/B) in the closed form; time = k*alpha + f*S/B."""
    n = int(world_size)
    if n == 1:
        return 0, 0.0
    frac = (n - 1) / n
    if algorithm == "ring":
        if collective in ("all_reduce", "broadcast", "reduce"):
            return 2 * (n - 1), 2 * frac
        return n - 1, frac
    if algorithm == "tree":
        levels = tree_levels(n)
        if collective == "all_reduce":
            return 2 * levels, 2.0 * levels
        if collective in ("all_gather", "reduce_scatter"):
            return 2 * levels, levels + frac
        if collective in ("broadcast", "reduce"):
            return levels, float(levels)
        return levels, frac
    # naive: every rank -> rank 0 in one round, rank 0 -> every rank in one round
    if collective == "all_reduce":
        return 2, 2.0 * (n - 1)
    if collective in ("all_gather", "reduce_scatter"):
        return 2, (n - 1) + frac
    if collective in ("broadcast", "reduce"):
        return 1, float(n - 1)
    return 1, frac


def collective_time_s(collective: Collective, nbytes: NBytes, world_size: WorldSize,
                      link: Link, algorithm: Algorithm = "ring") -> float:
    """Seconds for one collective on `nbytes` (full tensor) over `world_size` ranks.

    >>> from dpsim.sim.hardware import Link
    >>> link = Link("toy", bandwidth_GBps=1.0, latency_us=10.0)
    >>> round(collective_time_s("all_reduce", 4_000_000, 4, link) * 1e3, 3)  # ms
    6.06
    """
    return _time_s(cost_terms(collective, world_size, algorithm), nbytes, link)


def collective_times_s(collective: str, sizes_bytes: Sequence[int], world_size: int,
                       link: Link, algorithm: str = "ring") -> list[float]:
    """`collective_time_s` of each size in `sizes_bytes` (bytes of the full tensor)."""
    terms = cost_terms(collective, world_size, algorithm)
    return [_time_s(terms, nbytes, link) for nbytes in sizes_bytes]


def _time_s(terms: tuple[int, float], nbytes: int, link: Link) -> float:
    """k * alpha + f * S / B for the closed form's terms (k, f)."""
    n_alpha, s_over_b = terms
    latency_s = n_alpha * link.latency_us * 1e-6
    seconds = latency_s + s_over_b * nbytes / (link.bandwidth_GBps * 1e9)
    return finite_seconds(seconds, latency_s, link)


def bus_bandwidth_factor(collective: Collective, world_size: WorldSize) -> float:
    """busbw / algbw as nccl-tests defines it: 2(N-1)/N all-reduce, (N-1)/N all-gather,
    reduce-scatter, scatter, gather, and 1 for broadcast and reduce."""
    n = world_size
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    return (n - 1) / n


def algbw_GBps(nbytes: NBytes, time_s: Positive) -> float:
    """Algorithm bandwidth: full tensor bytes / time, in GB/s (1e9 bytes/s)."""
    return _finite_GBps(nbytes / time_s / 1e9, "time_s", time_s)


def busbw_GBps(collective: Collective, nbytes: NBytes, world_size: WorldSize,
               time_s: Positive) -> float:
    """Bus bandwidth (nccl-tests): algbw * bus_bandwidth_factor, comparable to link speed."""
    factor = bus_bandwidth_factor(collective, world_size)
    return _finite_GBps(algbw_GBps(nbytes, time_s) * factor, "time_s", time_s)


def bandwidths_GBps(collective: str, world_size: int, sizes_bytes: Sequence[int],
                    times_s: Sequence[float]) -> tuple[list[float], list[float]]:
    """(algbw, busbw) in GB/s of each size (bytes) and its time (seconds); 0 GB/s at 0 s."""
    factor = bus_bandwidth_factor(collective, world_size)
    algbw, busbw = [], []
    for i, (nbytes, t) in enumerate(zip(sizes_bytes, times_s, strict=True)):
        gbps = _finite_GBps(nbytes / t / 1e9, f"times_s[{i}]", t) if t > 0 else 0.0
        algbw.append(gbps)
        busbw.append(_finite_GBps(gbps * factor, f"times_s[{i}]", t))
    return algbw, busbw


def _finite_GBps(gbps: float, field: str, time_s: float) -> float:
    if gbps == float("inf"):
        raise ValueError(f"{field}={time_s!r} is too small: the bandwidth overflows; give a "
                         "longer time")
    return gbps


def bytes_sent_per_rank(collective: Collective, nbytes: NBytes, world_size: ListedRanks,
                        algorithm: Algorithm = "ring") -> list[int]:
    """Bytes each rank sends during one collective (index = rank; root is rank 0)."""
    sent, _ = bytes_per_rank(collective, nbytes, world_size, algorithm)
    return [int(b) for b in sent]


def bytes_received_per_rank(collective: Collective, nbytes: NBytes, world_size: ListedRanks,
                            algorithm: Algorithm = "ring") -> list[int]:
    """Bytes each rank receives during one collective (index = rank; root is rank 0)."""
    _, received = bytes_per_rank(collective, nbytes, world_size, algorithm)
    return [int(b) for b in received]


def ring_bytes_per_rank_formula(nbytes: int, world_size: int) -> float:
    """2(N-1)/N * S: what each rank sends (and receives) in a ring all-reduce."""
    return 2 * (world_size - 1) / world_size * nbytes
