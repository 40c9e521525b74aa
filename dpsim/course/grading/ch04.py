"""Chapter 4 exercises: the GIL's speed-up bound, a GIL share, and measured speed-ups.

Reference answers come from `dpsim.gil` (checked against its own simulation while the
cases are built; a disagreement is a bug in dpsim, raised as RuntimeError).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from dpsim.course.grading.core import Case, exercise
from dpsim.gil import GILConfig, predict_speedup, simulate


def _amdahl(g: float, n: int) -> float:
    return 1.0 / (g + (1.0 - g) / n)


def _largest(g: float, n: int, cores: int) -> float | None:
    """max instead of min over the bounds (None where that is just the GIL bound 1/g)."""
    largest = max(float(n), float(cores), 1 / g if g else 0.0)
    return None if g and largest == 1 / g else largest


@exercise("4.1", function="predicted_speedup", title="The GIL's speed-up bound", points=2)
def _speedup_cases(rng: random.Random) -> Iterator[Case]:
    cases = [(0.0, 4, 8), (1.0, 4, 8), (0.25, 8, 16), (0.1, 4, 2),
             (round(rng.uniform(0.3, 0.6), 2), rng.randint(2, 6), 64)]
    for g, n, cores in cases:
        expected = predict_speedup(g, n, cores)
        sim = simulate(GILConfig(n, 0.02, g, 100, n_cores=cores)).speedup
        if sim > expected * (1 + 1e-9) or (g in (0.0, 1.0) and not math.isclose(sim, expected,
                                                                                  rel_tol=1e-9)):
            raise RuntimeError(f"dpsim.gil.simulate ({sim:.4f}x) breaks the bound "
                               f"{expected:.4f}x for g={g}, n={n}; please report this")
        yield Case(
            f"predicted_speedup(gil_share={g}, n_threads={n}, n_cores={cores})",
            args=(g, n, cores), expected=expected, rel_tol=1e-9,
            mistakes={
                "you used Amdahl's law: it assumes nothing overlaps the serial part, but "
                "one thread's Python can overlap the other threads' GIL-free C code":
                    _amdahl(g, n),
                "you ignored the cores: threads cannot run on more cores than there are":
                    min(float(n), 1 / g) if g else float(n),
                "you scaled by the GIL-free share (n x (1 - g)); the bound is how many "
                "threads' worth of Python one GIL can serve": n * (1 - g),
                "you forgot the number of threads: with little Python, n threads give at "
                "most n x": min(1 / g, cores) if g else float(cores),
                "you took the largest of the bounds; the speed-up is capped by the "
                "smallest of them": _largest(g, n, cores),
            },
        )


@exercise("4.2", function="gil_share", title="The GIL share of a measured thread", points=1)
def _share_cases(rng: random.Random) -> Iterator[Case]:
    for n_ops in (3, 5, 8):
        t = 0.0
        intervals = []
        py = native = 0.0
        for _ in range(n_ops):
            a = round(rng.uniform(0.1, 2.0), 3)
            b = round(rng.uniform(0.1, 3.0), 3)
            gap = round(rng.uniform(0.0, 0.5), 3)
            intervals.append(("python", t, t + a))
            intervals.append(("native", t + a, t + a + b))
            py, native = py + a, native + b
            t += a + b + gap
        expected = py / (py + native)
        span = intervals[-1][2] - intervals[0][1]
        yield Case(
            f"gil_share(intervals) with {len(intervals)} intervals over {span:.3f} s",
            args=(list(intervals),), expected=expected, rel_tol=1e-9,
            mistakes={
                "you divided by the whole span; the gaps (the thread doing neither) are not "
                "work: divide by the time in Python plus the time in C": py / span,
                "you computed the GIL-free share (C code); the GIL share is the time in "
                "Python": native / (py + native),
                "you counted intervals, not seconds": 0.5,
            },
        )


@exercise("4.3", function="measured_speedup", title="Speed-up from measured times", points=1)
def _measured_cases(rng: random.Random) -> Iterator[Case]:
    for counts in ([1, 2, 4], [1, 2], [1, 3, 6]):
        t1 = round(rng.uniform(0.05, 0.2), 4)
        times = {k: round(t1 * k / rng.uniform(0.9, min(k, 2.5)), 4) for k in counts}
        times[1] = t1
        expected = {k: k * t1 / times[k] for k in counts}
        yield Case(
            f"measured_speedup({times})", args=(dict(times),), expected=expected,
            rel_tol=1e-9,
            mistakes={
                "you computed t(1) / t(k): that is for a fixed total amount of work; here "
                "each of the k workers does as much work as the single one":
                    {k: t1 / times[k] for k in counts},
                "you inverted it (t(k) / t(1) per worker)": {k: times[k] / (k * t1)
                                                            for k in counts},
            },
        )
