"""A stricter test of the collective model than alternating sizes: leave a whole published
run out of the fit, fit on every other run, predict all of its points.

The alternating split (`collectives.evaluate`) holds out sizes *between* sizes the fit saw
from the same log; this one asks what a learner asks of a new cluster: given other runs on
the same kind of network, how far off is a log dpsim has never seen? A run whose
bottleneck link (`nccl.bottleneck`) appears in no other run is not predicted (its
network's constants would be the fit's starting values, not a fit) and is listed apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsim.sim.fidelity.collectives import Point, fit, link_of, load_runs, points, run_predictions


def predict_left_out(pts: Sequence[Point], run: str, rounds: int = 4) -> np.ndarray:
    """Relative errors (predicted / published - 1) of `run`'s points, every size, with the
    constants fitted on all points of the other runs (training and held-out halves)."""
    train = [p for p in pts if p.run != run]
    mine = [p for p in pts if p.run == run]
    if not mine:
        raise ValueError(f"run={run!r} is not in the data; allowed: a run id of the data")
    t, _ = run_predictions(mine, fit(train, rounds))
    return t / np.array([p.time_us for p in mine]) - 1


def evaluate(rounds: int = 4) -> dict[str, Any]:
    """Every run that shares its bottleneck link with another run, left out in turn: per
    run and over all of their points, median, worst and the share within 30 %."""
    pts = points(load_runs())
    runs = list(dict.fromkeys(p.run for p in pts))
    link = {p.run: link_of(p) for p in pts}
    shared = Counter(link.values())
    rows: list[dict[str, Any]] = []
    every: list[float] = []
    worst: dict[str, Any] = {"error": 0.0}
    for run in runs:
        if shared[link[run]] < 2:
            continue
        errs = predict_left_out(pts, run, rounds)
        sizes = [p.nbytes for p in pts if p.run == run]
        i = int(np.abs(errs).argmax())
        rows.append({"run": run, "link": link[run], "n_points": len(sizes),
                     "median": float(np.median(np.abs(errs))),
                     "worst": float(abs(errs[i])), "worst_nbytes": sizes[i],
                     "within_30_percent": float(np.mean(np.abs(errs) <= 0.3))})
        every += [abs(float(e)) for e in errs]
        if abs(errs[i]) > abs(worst["error"]):
            worst = {"run": run, "nbytes": sizes[i], "error": float(errs[i])}
    arr = np.array(every)
    return {"rows": rows, "median": float(np.median(arr)), "worst": worst,
            "within_30_percent": float(np.mean(arr <= 0.3)), "n_points": int(arr.size),
            "not_predicted": [{"run": r, "link": link[r]} for r in runs if shared[link[r]] < 2]}
