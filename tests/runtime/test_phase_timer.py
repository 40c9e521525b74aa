"""PhaseTimer (dpsim.runtime.phase_timer): phases of steps as a measured Trace."""

from __future__ import annotations

import time

import pytest

from dpsim.runtime.phase_timer import PhaseTimer


def test_phases_become_steps_and_a_trace() -> None:
    timer = PhaseTimer("cpu")
    for _ in range(3):
        with timer.phase("forward"):
            time.sleep(0.001)
        with timer.phase("optimizer"):
            pass
        timer.end_step()
    assert len(timer.steps) == 3
    assert all(t >= 0.001 for t in timer.step_times_s)
    assert timer.fastest_step_s <= timer.median_step_s
    trace = timer.step_trace()
    assert trace.source == "measured"
    assert [e.kind for e in trace.events] == ["forward", "optimizer"]
    assert trace.events[0].start_s == 0.0


def test_misuse_says_what_to_do() -> None:
    timer = PhaseTimer()
    with pytest.raises(ValueError, match="end_step"):
        timer.end_step()
    with pytest.raises(ValueError, match="no step timed"):
        _ = timer.median_step_s
    with pytest.raises(ValueError, match="kind"), timer.phase(3):  # type: ignore[arg-type]
        pass
