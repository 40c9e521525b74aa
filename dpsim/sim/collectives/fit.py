"""Fit the alpha-beta model t(S) = k alpha + f S / B to timed collectives (numpy only).

(k, f) are a closed form's cost terms (`cost.cost_terms`: 2(N-1) and 2(N-1)/N for a ring
all-reduce). Two ways to weigh the timings:

* "relative": least squares on relative error, linear in (alpha, 1/B), so 1 KiB and
  64 MiB count alike (`dpsim.runtime.link_calibration.fit_alpha_beta`). When one
  term explains everything: a huge bandwidth (1/B = 1e-15 s per byte) or alpha = 0 and 1/B refitted.
* "absolute": an ordinary least-squares line t = a + b x through x = f S, so the large
  sizes dominate (`dpsim.runtime.link_calibration.measure_link`); alpha = max(a / k, 0),
  B = 1 / b, 1000 GB/s when the slope is not positive.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Annotated

import numpy as np

from dpsim.sim.checks import Each, Int, OneOf, Real
from dpsim.sim.hardware import Link
from dpsim.sim.limits import MAX_NBYTES, MAX_TERM, MAX_TIME_S, MIN_TIME_S

WEIGHTINGS = ("relative", "absolute")


def fit_link(sizes_bytes: Annotated[Sequence[int], Each(Int(0, MAX_NBYTES), 0)],
             times_s: Annotated[Sequence[float], Each(Real(MIN_TIME_S, MAX_TIME_S), 0)],
             n_alpha: Annotated[int, Int(0, MAX_TERM)],
             s_over_b: Annotated[float, Real(0, MAX_TERM)], name: str,
             weighting: Annotated[str, OneOf(WEIGHTINGS)] = "relative") -> Link:
    """The Link (alpha in us, B in GB/s) whose k alpha + f S / B best fits seconds per size
    (at least 2 of each, as many times as sizes)."""
    if len(sizes_bytes) < 2:
        raise ValueError(f"sizes_bytes={list(sizes_bytes)!r} has {len(sizes_bytes)} sizes; "
                         "allowed: at least 2, one per time")
    if len(sizes_bytes) != len(times_s):
        raise ValueError(f"times_s={list(times_s)!r} has {len(times_s)} times for "
                         f"{len(sizes_bytes)} sizes; allowed: the same number of each, at least 2")
    if weighting == "relative" and n_alpha == 0 and (s_over_b == 0 or not any(sizes_bytes)):
        raise ValueError(f"n_alpha=0 with s_over_b={s_over_b!r} and sizes_bytes="
                         f"{list(sizes_bytes)!r} leaves nothing to fit; allowed: n_alpha >= 1, "
                         "or s_over_b > 0 and a size > 0 (cost.cost_terms of N >= 2 ranks)")
    try:
        fit = _fit_absolute if weighting == "absolute" else _fit_relative
        link = fit(sizes_bytes, times_s, n_alpha, s_over_b, name)
    except ValueError as err:  # the fitted numbers are outside what a Link allows
        raise ValueError(f"times_s={list(times_s)!r} fit no link dpsim can describe ({err}); "
                         "give timings that grow with the size") from None
    if not (math.isfinite(link.bandwidth_GBps) and math.isfinite(link.latency_us)):
        raise ValueError(f"times_s={list(times_s)!r} fit no finite link (bandwidth "
                         f"{link.bandwidth_GBps!r} GB/s, latency {link.latency_us!r} us); "
                         "give timings that grow with the size")
    return link


def _fit_relative(sizes_bytes: Sequence[int], times_s: Sequence[float], n_alpha: int,
                  s_over_b: float, name: str) -> Link:
    """Least squares on relative error: 1 = k alpha / t + f S / t * (1/B) for every size."""
    sizes = np.asarray(sizes_bytes, dtype=float)
    times = np.asarray(times_s, dtype=float)
    design = np.stack([n_alpha / times, s_over_b * sizes / times], axis=1)
    (alpha_s, inv_bw), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    if inv_bw <= 0 and n_alpha > 0:  # latency explains everything: keep a huge bandwidth
        alpha_s, inv_bw = float(np.median(times)) / n_alpha, 1e-15
    if alpha_s < 0 or inv_bw <= 0:  # bandwidth explains everything: refit 1/B alone
        alpha_s = 0.0
        col = design[:, 1]
        inv_bw = float(col @ np.ones_like(times) / (col @ col))
    return Link(name, bandwidth_GBps=1.0 / inv_bw / 1e9, latency_us=float(alpha_s) * 1e6)


def _fit_absolute(sizes_bytes: Sequence[int], times_s: Sequence[float], n_alpha: int,
                  s_over_b: float, name: str) -> Link:
    """Ordinary least-squares line through (f S, t): intercept k alpha, slope 1/B."""
    xs = [s_over_b * nbytes for nbytes in sizes_bytes]
    ys = list(times_s)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    intercept = my - slope * mx
    latency_us = max(intercept / max(n_alpha, 1), 0.0) * 1e6
    bandwidth = 1 / slope / 1e9 if slope > 0 else 1e3
    return Link(name, bandwidth, latency_us)
