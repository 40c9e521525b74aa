"""Time the phases of real training steps on one device and turn them into a measured Trace.

Chapter 1 (notebooks/01_single_device.ipynb) writes its training loop in view and wraps
forward, backward and the optimizer step in `PhaseTimer.phase`; the device is synchronised
around each phase, so queued GPU work is counted in the phase that queued it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from dpsim.runtime.device import synchronize
from dpsim.sim import Event, Trace, require_int, require_type


class PhaseTimer:
    """Wall-clock seconds of named phases, step by step (`end_step` closes a step)."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.steps: list[list[tuple[str, float, float]]] = []  # per step: (kind, start, end)
        self._open: list[tuple[str, float, float]] = []

    @contextmanager
    def phase(self, kind: str) -> Iterator[None]:
        """Time the `with` block as phase `kind` ("forward", "backward", "optimizer", ...)."""
        require_type("kind", kind, str)
        synchronize(self.device)
        start = time.perf_counter()
        yield
        synchronize(self.device)
        self._open.append((kind, start, time.perf_counter()))

    def end_step(self) -> None:
        """Close the current step (its phases become one entry of `steps`)."""
        if not self._open:
            raise ValueError("end_step() with no phase timed since the last one; allowed: "
                             "time at least one phase with `with timer.phase(kind):` first")
        self.steps.append(self._open)
        self._open = []

    @property
    def step_times_s(self) -> list[float]:
        """Seconds per step: first phase's start to last phase's end."""
        return [s[-1][2] - s[0][1] for s in self.steps]

    def _timed(self) -> list[float]:
        times = self.step_times_s
        if not times:
            raise ValueError("no step timed yet; allowed: call end_step() after a step's phases")
        return times[1:] or times  # the first (warm-up) step left out when there are others

    @property
    def median_step_s(self) -> float:
        """Median step time, the first (warm-up) step left out when there are others."""
        return statistics.median(self._timed())

    @property
    def fastest_step_s(self) -> float:
        """The fastest step, warm-up left out: on a busy machine other programs only add
        time, so it is the step they disturbed least."""
        return min(self._timed())

    def step_trace(self, index: int = -1) -> Trace:
        """One step (default: the last) as a measured Trace on device 0, starting at 0 s."""
        require_int("index", index, -len(self.steps), len(self.steps) - 1)
        phases = self.steps[index]
        t0 = phases[0][1]
        trace = Trace("measured", meta={"device": str(self.device)})
        for kind, start, end in phases:
            trace.add(Event(0, "compute", kind, start - t0, end - t0))
        return trace
