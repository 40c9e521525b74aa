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

from dataclasses import dataclass

import numpy as np

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


def chunk_bounds(length: int, n_chunks: int) -> list[tuple[int, int]]:
    """[start, stop) of `n_chunks` near-equal chunks of `length` elements (as np.array_split)."""
    if length < 0 or n_chunks < 1:
        raise ValueError(f"length={length}, n_chunks={n_chunks}; allowed: length >= 0, "
                         "n_chunks >= 1")
    base, extra = divmod(length, n_chunks)
    bounds, start = [], 0
    for i in range(n_chunks):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _check_arrays(arrays: list[np.ndarray]) -> list[np.ndarray]:
    if len(arrays) < 1:
        raise ValueError("arrays=[] has no ranks; give one 1-D array per rank (world_size >= 1)")
    out = [np.asarray(a) for a in arrays]
    shape = out[0].shape
    for rank, a in enumerate(out):
        if a.ndim != 1:
            raise ValueError(f"arrays[{rank}] has shape {a.shape}; allowed: 1-D arrays")
        if a.shape != shape:
            raise ValueError(f"arrays[{rank}] has shape {a.shape} but arrays[0] has {shape}; "
                             "allowed: every rank's array has the same length")
    dtype = np.result_type(*out)
    return [a.astype(dtype, copy=True) for a in out]


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
