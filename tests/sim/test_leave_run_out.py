"""Leaving a whole published run out of the collective fit (dpsim.sim.fidelity.leave_run_out):
the left-out run's own numbers must not reach the constants that predict it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dpsim.sim.fidelity.collectives import load_runs, points
from dpsim.sim.fidelity.leave_run_out import predict_left_out

RUN = "h200-2x8-allreduce-nebius"  # InfiniBand NDR: other runs share its network


def test_left_out_run_does_not_inform_its_own_prediction() -> None:
    pts = points(load_runs())
    assert sum(p.run == RUN for p in pts) >= 5
    doubled = [replace(p, time_us=2 * p.time_us) if p.run == RUN else p for p in pts]
    errs = predict_left_out(pts, RUN, rounds=1)
    errs_doubled = predict_left_out(doubled, RUN, rounds=1)
    # same predictions: only the published times changed, so 1 + error halves exactly
    np.testing.assert_allclose(1 + errs_doubled, (1 + errs) / 2, rtol=1e-12)
    with pytest.raises(ValueError, match="run='nope'"):
        predict_left_out(pts, "nope", rounds=1)
