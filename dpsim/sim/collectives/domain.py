"""The domain of the collectives: which collectives and algorithms the closed forms know,
and the check that a time stays finite over a link.

The bounds on ranks and bytes are in `dpsim.sim.limits`. Closed forms cost the same whatever
N is, so they take any world size a dpsim `Cluster` can hold (1024 devices x 4096 nodes).
Answers with one entry per rank (bytes per rank, chunk bounds) take up to 65,536 ranks, 64
times the course's largest case of 1024 GPUs; the step-by-step ring keeps every rank's array
after every step and who summed into every chunk (N**3 entries a step), so it takes up to 32
ranks and 2**23 stored numbers. A message is at most 2**46 bytes (64 TiB, 256 times the fp32
gradients of a 70B model), so that N * S, the most one rank ever sends, fits in an int64.
"""

from __future__ import annotations

import math

from dpsim.sim.hardware import Link

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter",
               "gather")
ALGORITHMS = ("ring", "tree", "naive")


def finite_seconds(seconds: float, latency_s: float, link: Link, field: str = "link") -> float:
    """Return `seconds` if finite; else say which of the link's numbers made it overflow."""
    if math.isfinite(seconds):
        return seconds
    if not math.isfinite(latency_s):
        raise ValueError(f"{field}.latency_us={link.latency_us!r} is too large: the time "
                         "overflows; give a smaller latency")
    raise ValueError(f"{field}.bandwidth_GBps={link.bandwidth_GBps!r} is too small: the time "
                     "overflows; give a larger bandwidth")
