"""Chapter 4 exercises: the GIL's speed-up bound, a GIL share, measured speed-ups, and
threads against processes in the GIL model.

Reference answers come from `dpsim.sim.cost.gil` (checked against its own simulation while the
cases are built; a disagreement is a bug in dpsim, raised as RuntimeError). 4.4 is graded
by the structure the learner builds (the segments of a measured thread) and by what
`dpsim.sim.cost.gil.schedule` makes of it, never by a clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

from dpsim.course.grading.registry import Case, exercise
from dpsim.sim import DEFAULT_SWITCH_INTERVAL_S, GILConfig, predict_speedup, schedule, simulate_gil


def _amdahl(g: float, n: int) -> float:
    return 1.0 / (g + (1.0 - g) / n)


@exercise("4.1", function="predicted_speedup", title="The GIL's speed-up bound", points=2,
          forbidden=("dpsim.sim.cost.gil.predict_speedup",))
def _speedup_cases(rng: random.Random) -> Iterator[Case]:
    cases = [(0.0, 4, 8), (1.0, 4, 8), (0.25, 8, 16), (0.1, 4, 2),
             (round(rng.uniform(0.3, 0.6), 2), rng.randint(2, 6), 64)]
    for g, n, cores in cases:
        expected = predict_speedup(g, n, cores)
        sim = simulate_gil(GILConfig(n, 0.02, g, 100, n_cores=cores)).speedup
        if sim > expected * (1 + 1e-9) or (g in (0.0, 1.0) and not math.isclose(sim, expected,
                                                                                  rel_tol=1e-9)):
            raise RuntimeError(f"dpsim.sim.simulate_gil ({sim:.4f}x) breaks the bound "
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
                "you took the largest of the limits; the speed-up is capped by the "
                "smallest of them": max(float(n), float(cores), 1 / g if g else 0.0),
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


# --- 4.4 -------------------------------------------------------------------------------------


def model_segments(intervals: list[tuple[str, float, float]], *, swap: bool = False,
                   gaps: bool = False) -> list[tuple[str, float]]:
    """The GIL model's segments of a measured thread (or a slip: kinds swapped, gaps kept)."""
    kinds = {"python": "free", "native": "gil"} if swap else {"python": "gil", "native": "free"}
    out: list[tuple[str, float]] = []
    last_end = None
    for kind, start, end in sorted(intervals, key=lambda iv: iv[1]):
        if gaps and last_end is not None and start > last_end:
            out.append(("free", start - last_end))
        out.append((kinds[kind], end - start))
        last_end = end
    return out


def race(intervals: list[tuple[str, float, float]], n_workers: int, n_cores: int | None,
         start_s: float, *, slip: str = "") -> dict[str, Any]:
    """Threads under one GIL against processes with a GIL each, in dpsim.sim.cost.gil (or a
    slip)."""
    segs = model_segments(intervals, swap=slip == "swap", gaps=slip == "gaps")
    cores = None if slip == "cores" else n_cores
    threads_s = schedule([segs] * n_workers, DEFAULT_SWITCH_INTERVAL_S, cores).end_s
    alone = segs if slip == "one_gil" else [("free", s) for _, s in segs]
    processes_s = schedule([alone] * n_workers, DEFAULT_SWITCH_INTERVAL_S, cores).end_s
    if slip != "no_start":
        processes_s += start_s
    return {"threads_s": threads_s, "processes_s": processes_s,
            "faster": "threads" if threads_s <= processes_s else "processes"}


def _intervals(rng: random.Random, share: float, n_ops: int) -> list[tuple[str, float, float]]:
    t, out = 0.0, []
    for _ in range(n_ops):
        work = rng.uniform(0.002, 0.01)
        py = round(work * share * rng.uniform(0.8, 1.2), 5)
        native = round(work - py, 5) if work > py else 0.0005
        out.append(("python", round(t, 5), round(t + py, 5)))
        out.append(("native", round(t + py, 5), round(t + py + native, 5)))
        t += py + native + rng.choice([0.0, 0.0, round(rng.uniform(0.0005, 0.002), 5)])
    rng.shuffle(out)  # measurements need not come in order
    return out


@exercise("4.4", function="threads_or_processes", title="Threads or processes, by the GIL model",
          points=2)
def _race_cases(rng: random.Random) -> Iterator[Case]:
    for share, n_workers, n_cores, start_s in (
            (0.9, 4, 4, 0.01), (0.1, 4, 8, 0.05), (round(rng.uniform(0.4, 0.6), 2), 2, 2, 0.0),
            (round(rng.uniform(0.6, 0.8), 2), rng.randint(3, 6), 2, 0.02)):
        while True:  # no near-tie: which side wins must not hang on float rounding
            intervals = _intervals(rng, share, rng.randint(4, 10))
            args = (intervals, n_workers, n_cores, start_s)
            expected = race(*args)
            if abs(expected["threads_s"] - expected["processes_s"]) > 1e-3 * expected[
                    "threads_s"]:
                break
        slips = {
            "each process has its own GIL: no Python segment of one process waits for "
            "another's, so model the processes' segments as GIL-free": "one_gil",
            "starting a process costs start_s (spawn, import torch): add it to the "
            "processes' time": "no_start",
            "pass n_cores to dpsim.sim.cost.gil.schedule: the workers share the cores": "cores",
            "a 'python' interval holds the GIL (segment kind 'gil'); a 'native' one is "
            "GIL-free ('free'); yours are swapped": "swap",
            "the gaps between intervals are not work (the thread did neither): leave "
            "them out of the segments": "gaps",
        }
        yield Case(
            f"threads_or_processes({len(intervals)} intervals, Python share about {share}, "
            f"n_workers={n_workers}, n_cores={n_cores}, start_s={start_s})",
            args=args, expected=expected, rel_tol=1e-9, abs_tol=1e-12,
            mistakes={hint: race(*args, slip=slip) for hint, slip in slips.items()},
        )
