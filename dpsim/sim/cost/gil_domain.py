"""What the GIL model accepts, and what a simulation of it costs (see `dpsim.sim.cost.gil`).

A simulation takes one step per segment end or forced hand-over, each costing time in
proportion to the threads; runs whose estimated steps x (threads + 10) exceed MAX_STEPS
(under half a second) are refused, naming the field that drives the cost.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsim.sim.checks import require_choice, require_finite
from dpsim.sim.limits import MAX_CPU_S, MAX_STEPS, MAX_THREADS

Segment = tuple[str, float]  # ("gil" | "free", CPU seconds)
SEGMENT_KINDS = ("gil", "free")


def simulation_steps(n_threads: int, n_segments: int, gil_s: float, switch_interval_s: float,
                     n_cores: int | None = None) -> tuple[float, float]:
    """(steps, forced hand-overs) a schedule takes at most: one step per segment end or
    hand-over; a hand-over follows at least one switch interval of holding, and holding
    lasts at most the GIL seconds `gil_s` slowed by sharing the cores (n_threads / n_cores)."""
    slowdown = max(1.0, n_threads / n_cores) if n_cores is not None else 1.0
    handovers = gil_s * slowdown / switch_interval_s
    return n_segments + handovers + 1, handovers


def check_steps(named: str, n_threads: int, n_segments: int, gil_s: float,
                 switch_interval_s: float, n_cores: int | None) -> float:
    """Refuse a simulation whose steps x (n_threads + 10) exceed MAX_STEPS (the message
    starts with `named`, "field=value"); return that cost."""
    steps, handovers = simulation_steps(n_threads, n_segments, gil_s, switch_interval_s,
                                        n_cores)
    cost = steps * (n_threads + 10)
    if cost > MAX_STEPS:
        raise ValueError(
            f"{named} needs about {steps:,.0f} simulation steps ({n_segments:,} "
            f"segments, {handovers:,.0f} forced GIL hand-overs) of {n_threads} threads; "
            f"allowed: steps x (threads + 10) <= {MAX_STEPS:,} (under half a second): fewer "
            "threads or segments, less work under the GIL, or a longer switch interval")
    return cost


def check_threads(threads: Sequence[Sequence[Segment]]) -> tuple[int, float]:
    """Refuse what is not 1..MAX_THREADS lists of (kind, seconds) segments; return
    (segments longer than 0 s, seconds under the GIL)."""
    if isinstance(threads, (str, bytes)) or not isinstance(threads, Sequence):
        raise ValueError(f"threads={threads!r} is not a list; give one list of (kind, "
                         "seconds) segments per thread")
    if not 1 <= len(threads) <= MAX_THREADS:
        raise ValueError(f"threads=<{len(threads)} threads> is out of range; allowed: 1 to "
                         f"{MAX_THREADS} threads")
    for i, segs in enumerate(threads):
        if isinstance(segs, (str, bytes)) or not isinstance(segs, Sequence):
            raise ValueError(f"threads[{i}]={segs!r} is not a list of (kind, seconds) segments")
    total = sum(len(segs) for segs in threads)
    if total > MAX_STEPS:
        raise ValueError(f"threads=<{len(threads)} threads, {total:,} segments> is too long; "
                         f"allowed at most {MAX_STEPS:,} segments in all")
    kept, gil_s = 0, 0.0
    for i, segs in enumerate(threads):
        for k, seg in enumerate(segs):
            if type(seg) is not tuple or len(seg) != 2 or seg[0] not in SEGMENT_KINDS or \
                    type(seg[1]) not in (float, int) or not 0 <= seg[1] <= MAX_CPU_S:
                _check_segment(f"threads[{i}][{k}]", seg)  # the slow path names the culprit
            kept += seg[1] > 0
            gil_s += seg[1] if seg[0] == "gil" else 0.0
    return kept, gil_s


def _check_segment(field: str, seg: Segment) -> None:
    if isinstance(seg, (str, bytes)) or not isinstance(seg, Sequence) or len(seg) != 2:
        raise ValueError(f"{field}={seg!r} is not a (kind, seconds) pair; give ('gil' or "
                         "'free', CPU seconds)")
    require_choice(f"{field} kind", seg[0], SEGMENT_KINDS)
    require_finite(f"{field} seconds", seg[1], 0, MAX_CPU_S)
