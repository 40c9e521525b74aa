"""Calibrate the alpha-beta model on this machine from timed real all-reduces.

`measure_all_reduce` times `dist.all_reduce` (or the hand-written ring) on real ranks;
`fit_alpha_beta` finds the latency alpha and bandwidth B for which the ring closed form
    t(S) = 2(N-1) alpha + 2(N-1)/N S / B
best matches those times (`dpsim.sim.collectives.fit`: least squares on relative error, so
1 KiB and 64 MiB count alike). The fit is pure arithmetic on the measured numbers: same
numbers, same Link. Its error on the sizes it was fitted to is a residual; `held_out_error`
fits every other size and reports the error on the sizes the fit did not see, the
prediction error. `measure_link`, called inside running ranks, fits the same line to the
fastest of repeated all-reduces (the calibration a DDP prediction uses on a busy machine).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from dpsim.sim import Link, collective_time_s, cost_terms, fit_link, require_choice, require_int

KiB, MiB = 1024, 1024**2
DEFAULT_SIZES = (KiB, 16 * KiB, 256 * KiB, 4 * MiB)  # small: a notebook on 2 cores
BENCHMARK_SIZES = tuple(KiB * 4**k for k in range(9))  # 1 KiB .. 64 MiB


@dataclass(frozen=True)
class Calibration:
    """A fitted Link and the measurements it was fitted to (times in seconds)."""

    link: Link
    collective: str
    world_size: int
    sizes_bytes: tuple[int, ...]
    measured_s: tuple[float, ...]

    @property
    def predicted_s(self) -> list[float]:
        """The calibrated model's time for each measured size."""
        return [collective_time_s(self.collective, s, self.world_size, self.link)
                for s in self.sizes_bytes]

    @property
    def errors(self) -> list[float]:
        """|predicted - measured| / measured for each size."""
        return [abs(p - m) / m for p, m in zip(self.predicted_s, self.measured_s, strict=True)]

    @property
    def median_error(self) -> float:
        """Median relative in-sample residual over the sizes the fit saw (not a prediction)."""
        return statistics.median(self.errors)

    def __str__(self) -> str:
        return (f"calibrated on {self.world_size} ranks: latency alpha = "
                f"{self.link.latency_us:.1f} us, bandwidth B = {self.link.bandwidth_GBps:.2f} GB/s"
                f"; median residual {100 * self.median_error:.0f}% over the "
                f"{len(self.sizes_bytes)} sizes it was fitted to")


@dataclass(frozen=True)
class HeldOutError:
    """Relative errors of a fit on the sizes it did not see (fractions, not percent)."""

    fitted_sizes: tuple[int, ...]
    held_out_sizes: tuple[int, ...]
    errors: tuple[float, ...]  # one per held-out size: |predicted - measured| / measured

    @property
    def median(self) -> float:
        """Median held-out relative error: the prediction error."""
        return statistics.median(self.errors)

    @property
    def worst(self) -> float:
        """Largest held-out relative error."""
        return max(self.errors)


def fit_alpha_beta(sizes_bytes: Sequence[int], measured_s: Sequence[float], world_size: int,
                   collective: str = "all_reduce", name: str = "calibrated link") -> Calibration:
    """Fit alpha (us) and B (GB/s) of the ring model to measured seconds per size."""
    require_int("world_size", world_size, 2)
    link = fit_link(sizes_bytes, measured_s, *cost_terms(collective, world_size, "ring"), name)
    return Calibration(link, collective, world_size, tuple(int(s) for s in sizes_bytes),
                       tuple(float(t) for t in measured_s))


def held_out_error(sizes_bytes: Sequence[int], measured_s: Sequence[float], world_size: int,
                   collective: str = "all_reduce") -> HeldOutError:
    """Fit alpha and B on every other size (sorted; 1st, 3rd, ...), test on the rest.

    Needs at least 4 sizes, so that the fit sees 2 and 2 are held out.
    """
    require_int("world_size", world_size, 2)
    if isinstance(sizes_bytes, str) or not isinstance(sizes_bytes, Sequence) or len(
            sizes_bytes) < 4:
        raise ValueError(f"sizes_bytes={sizes_bytes!r} is not a list of at least 4 sizes; "
                         "allowed: 4 or more, every other one held out of the fit")
    if isinstance(measured_s, str) or not isinstance(measured_s, Sequence) or len(
            measured_s) != len(sizes_bytes):
        raise ValueError(f"measured_s={measured_s!r} is not one time per size; allowed: a list "
                         f"of {len(sizes_bytes)} times in seconds")
    pairs = sorted(zip(sizes_bytes, measured_s, strict=True), key=lambda p: p[0])
    fitted, held = pairs[::2], pairs[1::2]
    fit = fit_alpha_beta([s for s, _ in fitted], [t for _, t in fitted], world_size, collective)
    errors = tuple(abs(collective_time_s(collective, s, world_size, fit.link) - t) / t
                   for s, t in held)
    return HeldOutError(tuple(int(s) for s, _ in fitted), tuple(int(s) for s, _ in held), errors)


def measure_all_reduce(world_size: int = 4, sizes_bytes: Sequence[int] = DEFAULT_SIZES,
                       repeats: int = 3, impls: Sequence[str] = ("torch",),
                       backend: str = "auto", timeout_s: float = 300.0
                       ) -> dict[str, dict[int, float]]:
    """Median seconds of one all-reduce per size on `world_size` real ranks, per impl."""
    from dpsim.runtime.collective_workers import time_all_reduce
    from dpsim.runtime.launch import launch

    require_int("world_size", world_size, 2, 64)
    results = launch(time_all_reduce, world_size, args=(list(sizes_bytes), repeats, list(impls)),
                     backend=backend, timeout_s=timeout_s)
    return dict(results[0])


def calibrate(world_size: int = 4, sizes_bytes: Sequence[int] = DEFAULT_SIZES,
              repeats: int = 3, impl: str = "torch", backend: str = "auto") -> Calibration:
    """Time real all-reduces on this machine and fit the alpha-beta ring model to them."""
    require_choice("impl", impl, ("torch", "hand"))
    measured = measure_all_reduce(world_size, sizes_bytes, repeats, (impl,), backend)[impl]
    sizes = sorted(measured)
    return fit_alpha_beta(sizes, [measured[s] for s in sizes], world_size,
                          name=f"this machine, calibrated ({world_size} ranks, {impl})")


LINK_SIZES = (1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 21, 1 << 22)  # bytes, 4 KiB-4 MiB


def measure_link(sizes: tuple[int, ...] = LINK_SIZES, repeats: int = 40) -> Link:
    """Fit alpha (latency) and beta (bandwidth) of the ring all-reduce formula to timings.

    Call on every rank of a group; t = 2(N-1) alpha + 2(N-1)/N S / B (dpsim.sim.collectives.cost)
    fitted as a plain line, absolute error (dpsim.sim.collectives.fit, weighting="absolute"),
    with t the FASTEST of `repeats` timed all-reduces per size (slowest rank). Other
    programs on a shared machine only add time (a peer descheduled mid-message), so the
    fastest repeat is the one they disturbed least; the sizes stop at 4 MiB (a few
    milliseconds) so that some repeats run undisturbed even on a busy machine.
    """
    import torch.distributed as dist

    from dpsim.runtime.collective_workers import time_all_reduce_samples

    n = dist.get_world_size()
    samples = time_all_reduce_samples(dist.get_rank(), n, sizes, repeats, ("torch",))["torch"]
    ys = [min(samples[int(nbytes)]) for nbytes in sizes]
    return fit_link(sizes, ys, *cost_terms("all_reduce", n, "ring"),
                    f"gloo all-reduce, {n} ranks (measured)", weighting="absolute")
