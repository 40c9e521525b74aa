"""A collective's cost as series for figures: bytes per rank, time and bandwidth per size.

`rank_traffic` (bytes each rank sends and receives, per algorithm), `bandwidth_series`
(algbw and busbw of measured times) and `model_series` (alpha-beta time and busbw per
size, per algorithm) compute what `dpsim.viz.traffic` draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import Each, Int, OneOf, require_finite, require_int
from dpsim.sim.collectives.cost import (
    ALGORITHMS,
    Collective,
    bandwidths_GBps,
    bytes_received_per_rank,
    bytes_sent_per_rank,
    collective_times_s,
    ring_bytes_per_rank_formula,
)
from dpsim.sim.collectives.domain import COLLECTIVES as COLLECTIVES  # what `collective` takes
from dpsim.sim.hardware import Link
from dpsim.sim.limits import MAX_NBYTES, ListedRanks, NBytes, WorldSize

Algorithms = Annotated[Sequence[str], Each(OneOf(ALGORITHMS), 0)]
Sizes = Annotated[Sequence[int], Each(Int(0, MAX_NBYTES), 0)]  # bytes of the full tensor


@dataclass(frozen=True)
class RankTraffic:
    """Bytes each rank sends and receives in one collective, per algorithm (index = rank)."""

    collective: str
    nbytes: int  # S, the full tensor
    world_size: int
    sent: dict[str, list[int]]  # algorithm -> bytes per rank
    received: dict[str, list[int]]
    ring_formula_bytes: float  # 2(N-1)/N S: a rank's bytes in a ring all-reduce


@dataclass(frozen=True)
class SizeSeries:
    """Seconds, algbw and busbw (GB/s) per message size (bytes) for one implementation."""

    sizes_bytes: list[int]
    time_s: list[float]
    algbw_GBps: list[float]
    busbw_GBps: list[float]


def rank_traffic(collective: Collective, nbytes: NBytes, world_size: ListedRanks,
                 algorithms: Algorithms = ("naive", "tree", "ring")) -> RankTraffic:
    """Bytes sent and received by every rank under each algorithm (simulated)."""
    return RankTraffic(
        collective, nbytes, world_size,
        {a: bytes_sent_per_rank(collective, nbytes, world_size, a) for a in algorithms},
        {a: bytes_received_per_rank(collective, nbytes, world_size, a) for a in algorithms},
        ring_bytes_per_rank_formula(nbytes, world_size))


def bandwidth_series(measured: Mapping[str, Mapping[int, float]], world_size: WorldSize,
                     collective: Collective = "all_reduce") -> dict[str, SizeSeries]:
    """algbw and busbw (nccl-tests definitions) of measured seconds per size, per impl."""
    _check_measured(measured)
    out = {}
    for impl, per_size in measured.items():
        sizes = sorted(per_size)
        times = [per_size[s] for s in sizes]
        out[impl] = SizeSeries(sizes, times, *bandwidths_GBps(collective, world_size, sizes,
                                                              times))
    return out


def model_series(collective: Collective, world_size: WorldSize, link: Link, sizes_bytes: Sizes,
                 algorithms: Algorithms = ALGORITHMS) -> dict[str, SizeSeries]:
    """Alpha-beta seconds, algbw and busbw per size for each algorithm (0 GB/s at 0 s)."""
    out = {}
    for algorithm in algorithms:
        times = collective_times_s(collective, sizes_bytes, world_size, link, algorithm)
        out[algorithm] = SizeSeries(list(sizes_bytes), times,
                                    *bandwidths_GBps(collective, world_size, sizes_bytes, times))
    return out


def _check_measured(measured: Mapping[str, Mapping[int, float]]) -> None:
    """{implementation: {bytes: seconds > 0}}, every size an int, every time finite."""
    if not isinstance(measured, Mapping):
        raise ValueError(f"measured={measured!r} is not a mapping; give "
                         "{implementation: {bytes: seconds}}")
    for impl, per_size in measured.items():
        if not isinstance(per_size, Mapping):
            raise ValueError(f"measured[{impl!r}]={per_size!r} is not a mapping; give "
                             "{bytes: seconds}")
        for size, seconds in per_size.items():
            require_int(f"measured[{impl!r}] size", size, 0, MAX_NBYTES)
            require_finite(f"measured[{impl!r}][{size!r}]", seconds, 0, low_inclusive=False)
            if size / seconds == float("inf"):
                raise ValueError(f"measured[{impl!r}][{size!r}]={seconds!r} is too small: "
                                 "the bandwidth overflows; give a longer time")
