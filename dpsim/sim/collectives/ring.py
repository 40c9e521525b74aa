"""The ring all-reduce, step by step, on simulated ranks holding numpy arrays.

Each of the N ranks cuts its array into N chunks (sizes differ by at most one element;
some are empty when the array has fewer than N elements). Ranks form a ring
0 -> 1 -> ... -> N-1 -> 0 and at every step each rank sends one chunk to its right
neighbour, all at once:

* reduce-scatter, steps t = 0 .. N-2: rank r sends chunk (r - 1 - t) mod N; the receiver
  adds it to its own copy of that chunk. Afterwards rank r holds the full sum of chunk r.
* all-gather, steps t = 0 .. N-2: rank r sends chunk (r - t) mod N; the receiver
  overwrites its copy. Afterwards every rank holds the full sum.

Every rank sends 2(N-1) chunks, about 2(N-1)/N of the array, whatever N is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from dpsim.sim.checks import Int
from dpsim.sim.limits import MAX_RING_RANKS, MAX_RING_STORED, ListedRanks

PHASES = ("start", "reduce_scatter", "all_gather")


@dataclass(frozen=True)
class RingSend:
    """One message of one step: `src` sends elements [start, stop) (chunk `chunk`) to `dst`."""

    src: int
    dst: int
    chunk: int
    start: int
    stop: int


@dataclass(frozen=True)
class RingStep:
    """The state of every rank after one step ("start" is the state before any send)."""

    phase: str  # "start", "reduce_scatter" or "all_gather"
    step: int  # 1 .. N-1 within the phase; 0 for "start"
    sends: tuple[RingSend, ...]  # the messages of this step (empty for "start")
    buffers: tuple[np.ndarray, ...]  # buffers[rank]: that rank's array after the step
    contributors: tuple[tuple[tuple[int, ...], ...], ...]  # [rank][chunk]: ranks summed in
    bounds: tuple[tuple[int, int], ...]  # element range [start, stop) of each chunk

    @property
    def label(self) -> str:
        """Short title such as 'reduce_scatter step 2/3'."""
        if self.phase == "start":
            return "start: every rank holds its own data"
        n_steps = len(self.bounds) - 1
        return f"{self.phase} step {self.step}/{n_steps}"


def chunk_bounds(length: Annotated[int, Int(0)], n_chunks: ListedRanks
                 ) -> list[tuple[int, int]]:
    """[start, stop) of `n_chunks` near-equal chunks of `length` elements (as np.array_split)."""
    base, extra = divmod(length, n_chunks)
    bounds, start = [], 0
    for i in range(n_chunks):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def chunk_sizes(length: int, n_chunks: int) -> np.ndarray:
    """Elements in each chunk of `chunk_bounds(length, n_chunks)`, as an int64 array."""
    base, extra = divmod(length, n_chunks)
    return base + (np.arange(n_chunks) < extra).astype(np.int64)


def _check_arrays(arrays: list[np.ndarray]) -> list[np.ndarray]:
    if isinstance(arrays, (str, bytes, np.ndarray)) or not isinstance(arrays, Sequence):
        raise ValueError(f"arrays={arrays!r} is not a list; give a list of 1-D arrays, one "
                         "per rank")
    if len(arrays) < 1:
        raise ValueError("arrays=[] has no ranks; give one 1-D array per rank (world_size >= 1)")
    if len(arrays) > MAX_RING_RANKS:
        raise ValueError(f"len(arrays)={len(arrays)} is out of range; allowed: 1 to "
                         f"{MAX_RING_RANKS} ranks (every step keeps who summed into every "
                         "chunk of every rank)")
    out = []
    for rank, a in enumerate(arrays):
        try:
            out.append(np.asarray(a))
        except ValueError:
            raise ValueError(f"arrays[{rank}]={a!r} is not an array of numbers; allowed: "
                             "1-D arrays of integers or floats") from None
    shape = out[0].shape
    for rank, a in enumerate(out):
        if a.ndim != 1:
            raise ValueError(f"arrays[{rank}].shape={a.shape!r} is not 1-D; allowed: 1-D "
                             "arrays")
        if a.dtype.kind not in "iuf":
            raise ValueError(f"arrays[{rank}].dtype={a.dtype!r} is not allowed; allowed: 1-D "
                             "arrays of integers or floats")
        if a.shape != shape:
            raise ValueError(f"arrays[{rank}].shape={a.shape!r} differs from arrays[0].shape="
                             f"{shape!r}; allowed: every rank's array has the same length")
    stored = (2 * len(out) - 1) * len(out) * shape[0]
    if stored > MAX_RING_STORED:
        raise ValueError(f"arrays[0].shape={shape!r} is too long for {len(out)} ranks: the "
                         f"steps would keep {stored:,} numbers; allowed at most "
                         f"{MAX_RING_STORED:,} ((2N - 1) x N x length)")
    dtype = np.result_type(*out)
    _check_sum_fits(out, dtype)
    return [a.astype(dtype, copy=True) for a in out]


def _check_sum_fits(arrays: list[np.ndarray], dtype: np.dtype) -> None:
    """Refuse values that are not finite, or whose sum over the ranks overflows `dtype`."""
    n = len(arrays)
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
    limit = int(info.max) if dtype.kind in "iu" else float(info.max)
    for rank, a in enumerate(arrays):
        if a.size == 0:
            continue
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            i = int(np.flatnonzero(~np.isfinite(a))[0])
            raise ValueError(f"arrays[{rank}][{i}]={a[i]!r} is not finite; give finite numbers")
        i = int(np.argmax(np.abs(a.astype(np.float64))))
        biggest = abs(int(a[i])) if a.dtype.kind in "iu" else abs(float(a[i]))
        if n * biggest > limit:
            raise ValueError(f"arrays[{rank}][{i}]={a[i]!r} is too large: a sum over {n} "
                             f"ranks could overflow {dtype}; allowed: |value| <= {limit} / {n}")


def ring_all_reduce_steps(arrays: list[np.ndarray]) -> list[RingStep]:
    """Run a ring all-reduce over one 1-D array per rank; return the start and every step.

    The result has 1 + 2(N-1) steps; in the last one every buffer equals the element-wise
    sum of `arrays` (up to floating-point rounding order).
    """
    buffers = _check_arrays(arrays)
    n = len(buffers)
    bounds = tuple(chunk_bounds(buffers[0].shape[0], n))
    who: list[list[set[int]]] = [[{r} for _ in range(n)] for r in range(n)]

    def snapshot(phase: str, step: int, sends: tuple[RingSend, ...]) -> RingStep:
        contributors = tuple(tuple(tuple(sorted(c)) for c in row) for row in who)
        return RingStep(phase, step, sends, tuple(b.copy() for b in buffers), contributors,
                        bounds)

    steps = [snapshot("start", 0, ())]
    for phase, offset in (("reduce_scatter", 1), ("all_gather", 0)):
        for t in range(n - 1):
            sends = tuple(
                RingSend(r, (r + 1) % n, c, *bounds[c])
                for r in range(n)
                for c in [(r - offset - t) % n]
            )
            # every rank sends what it held before the step, then receivers update
            payloads = [buffers[s.src][s.start:s.stop].copy() for s in sends]
            sources = [set(who[s.src][s.chunk]) for s in sends]
            for s, data, src_set in zip(sends, payloads, sources, strict=True):
                if phase == "reduce_scatter":
                    buffers[s.dst][s.start:s.stop] += data
                    who[s.dst][s.chunk] |= src_set
                else:
                    buffers[s.dst][s.start:s.stop] = data
                    who[s.dst][s.chunk] = src_set
            steps.append(snapshot(phase, t + 1, sends))
    return steps


def ring_reduce_scatter(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Reduce-scatter by the ring: element r of the result is chunk r of the sum (rank r)."""
    steps = ring_all_reduce_steps(arrays)
    n = len(arrays)
    after = steps[n - 1]  # start + (N-1) reduce-scatter steps
    return [after.buffers[r][slice(*after.bounds[r])].copy() for r in range(n)]
