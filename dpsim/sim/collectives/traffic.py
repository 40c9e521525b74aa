"""Bytes each rank sends and receives in one collective, by formula (no rounds simulated).

The same numbers as summing the messages of the tests' oracle (`schedule` in
`tests/support/schedule.py`; the tests compare them rank by rank), computed with a few
array operations whatever N is. Root is rank 0; the chunks c = 0..N-1 of S bytes have
sizes s_c from `ring.chunk_sizes` (differ by at most 1).

* ring: reduce-scatter, rank r sends all chunks but its own (S - s_r) and receives all but
  its left neighbour's; all-gather sends all but its right neighbour's and receives all
  but its own. Broadcast and reduce pass S along the chain 0 -> N-1 (or back); scatter
  and gather pass each chunk hop by hop, so a rank forwards the chunks beyond it.
* tree (binomial): rank r > 0 with lowest set bit 2**z heads the subtree [r, r + 2**z)
  (rank 0 heads everything). Going up, r sends its payload once and receives one from each
  child; going down (broadcast), r sends S at every level k with r < 2**k < N - r.
* naive: every rank talks to rank 0 only.
"""

from __future__ import annotations

import numpy as np

from dpsim.sim.collectives.ring import chunk_sizes

Traffic = tuple[np.ndarray, np.ndarray]  # (bytes sent, bytes received) per rank, int64


def bytes_per_rank(collective: str, nbytes: int, world_size: int,
                   algorithm: str = "ring") -> Traffic:
    """(bytes sent, bytes received) by every rank in one collective on `nbytes` (full tensor)."""
    n = world_size
    if n == 1:
        return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    sizes = chunk_sizes(nbytes, n)
    if algorithm == "ring":
        return _ring(collective, nbytes, sizes)
    if algorithm == "tree":
        return _tree(collective, nbytes, sizes)
    return _naive(collective, nbytes, sizes)


def _add(a: Traffic, b: Traffic) -> Traffic:
    return a[0] + b[0], a[1] + b[1]


# --- ring ---------------------------------------------------------------------------------
def _ring(collective: str, nbytes: int, sizes: np.ndarray) -> Traffic:
    n = len(sizes)
    rs = (nbytes - sizes, nbytes - np.roll(sizes, 1))  # all chunks but r's / left neighbour's
    ag = (nbytes - np.roll(sizes, -1), nbytes - sizes)
    if collective == "all_reduce":
        return _add(rs, ag)
    if collective == "reduce_scatter":
        return rs
    if collective == "all_gather":
        return ag
    whole = np.full(n, nbytes, dtype=np.int64)
    first, last = whole.copy(), whole.copy()
    first[0], last[-1] = 0, 0
    if collective == "broadcast":
        return last, first
    if collective == "reduce":
        return first, last
    beyond = np.concatenate([np.cumsum(sizes[::-1])[::-1], [0]])  # beyond[r] = sum s_r..s_N-1
    ahead = beyond[1:].copy()  # chunks past rank r
    ahead[-1] = 0
    behind = beyond[:-1].copy()  # chunks from rank r on, for r > 0
    behind[0] = 0
    if collective == "scatter":
        return ahead, behind
    return behind, ahead  # gather: the scatter, time-reversed


# --- tree ---------------------------------------------------------------------------------
def _bit_length(x: np.ndarray) -> np.ndarray:
    """int.bit_length of every entry (x >= 0, exact below 2**53)."""
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)


def _tree(collective: str, nbytes: int, sizes: np.ndarray) -> Traffic:
    n = len(sizes)
    ranks = np.arange(n, dtype=np.int64)
    levels = int(n - 1).bit_length()
    low_bit = np.maximum(_bit_length(ranks & -ranks) - 1, 0)  # z: lowest set bit of r > 0
    low_bit[0] = levels
    end = np.minimum(ranks + (np.int64(1) << low_bit), n)  # subtree of r is [r, end)
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    subtree = prefix[end] - prefix[ranks]  # chunks of r's subtree, r's own included
    below = subtree - sizes  # chunks of r's children's subtrees
    below[0] = nbytes - sizes[0]
    subtree[0] = 0  # rank 0 sends nothing up and receives nothing down
    children = np.minimum(low_bit, _bit_length(np.maximum(n - ranks - 1, 0)))
    not_root = np.full(n, nbytes, dtype=np.int64)
    not_root[0] = 0
    up = (not_root, nbytes * children)  # reduce: S once up, S from every child
    down = (nbytes * np.maximum(_bit_length(n - ranks - 1) - _bit_length(ranks), 0), not_root)
    gather = (subtree, below)
    scatter = (below, subtree)
    return {
        "all_reduce": lambda: _add(up, down),
        "all_gather": lambda: _add(gather, down),
        "reduce_scatter": lambda: _add(up, scatter),
        "broadcast": lambda: down,
        "reduce": lambda: up,
        "scatter": lambda: scatter,
        "gather": lambda: gather,
    }[collective]()


# --- naive --------------------------------------------------------------------------------
def _naive(collective: str, nbytes: int, sizes: np.ndarray) -> Traffic:
    n = len(sizes)
    whole = np.full(n, nbytes, dtype=np.int64)

    def to_root(per_rank: np.ndarray) -> Traffic:
        sent = per_rank.copy()
        sent[0] = 0
        received = np.zeros(n, dtype=np.int64)
        received[0] = per_rank[1:].sum()
        return sent, received

    def from_root(per_rank: np.ndarray) -> Traffic:
        received, sent = to_root(per_rank)
        return sent, received

    return {
        "all_reduce": lambda: _add(to_root(whole), from_root(whole)),
        "all_gather": lambda: _add(to_root(sizes), from_root(whole)),
        "reduce_scatter": lambda: _add(to_root(whole), from_root(sizes)),
        "broadcast": lambda: from_root(whole),
        "reduce": lambda: to_root(whole),
        "scatter": lambda: from_root(sizes),
        "gather": lambda: to_root(sizes),
    }[collective]()
