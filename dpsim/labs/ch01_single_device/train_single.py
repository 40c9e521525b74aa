"""A real single-device training run: losses, step times, memory, and a measured Trace."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpsim.runtime.device import resolve_device, synchronize
from dpsim.runtime.measure import StepMemory, measure_step_memory
from dpsim.runtime.optimizers import build_optimizer
from dpsim.sim import Event, MemoryBreakdown, Trace, require_int


@dataclass
class TrainResult:
    """What a real run measured. Times in seconds; memory in bytes."""

    device: str
    note: str  # where it ran and why
    batch_size: int
    optimizer: str
    losses: list[float]
    step_times_s: list[float]
    memory: StepMemory
    trace: Trace  # forward/backward/optimizer of every timed step, source="measured"
    phase_s: dict[str, float] = field(default_factory=dict)  # median seconds per phase

    @property
    def step_time_s(self) -> float:
        """Median step time, first (warm-up) step excluded when there are others."""
        times = self.step_times_s[1:] or self.step_times_s
        return statistics.median(times)

    @property
    def fastest_step_time_s(self) -> float:
        """The fastest step, first (warm-up) step excluded when there are others.

        On a busy machine other programs only add time: the fastest step is the one they
        disturbed least, which is what a calibrated prediction of this machine describes.
        """
        return min(self.step_times_s[1:] or self.step_times_s)

    @property
    def samples_per_s(self) -> float:
        """Throughput at the median step time."""
        return self.batch_size / self.step_time_s

    def step_trace(self, index: int = -1) -> Trace:
        """The events of one step (default: the last), shifted to start at 0 s."""
        steps = [self.trace.events[i:i + 3] for i in range(0, len(self.trace.events), 3)]
        events = steps[index]
        t0 = events[0].start_s
        shifted = [Event(e.device, e.stream, e.kind, e.start_s - t0, e.end_s - t0, e.nbytes,
                         e.label) for e in events]
        return Trace("measured", shifted, meta=dict(self.trace.meta))

    @property
    def breakdown(self) -> MemoryBreakdown:
        """Measured memory by category."""
        return self.memory.breakdown


def train(
    model: nn.Module,
    dataset: TensorDataset,
    *,
    steps: int = 30,
    batch_size: int = 64,
    optimizer: str = "adam",
    lr: float = 1e-3,
    device: str = "auto",
    progress: bool = True,
    seed: int = 0,
) -> TrainResult:
    """Train `model` for `steps` steps on shuffled batches of `dataset` (seeded)."""
    require_int("steps", steps, 1, 1_000_000)
    require_int("batch_size", batch_size, 1, len(dataset))
    dev, note = resolve_device(device)
    model = model.to(dev)
    opt = build_optimizer(optimizer, model.parameters(), lr)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(seed))
    batches = _forever(loader)
    x0, y0 = next(batches)
    memory = measure_step_memory(model, opt, x0.to(dev), y0.to(dev))  # also step 0
    trace = Trace("measured", meta={"device": str(dev), "batch_size": batch_size})
    losses: list[float] = []
    times: list[float] = []
    phases: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    bar = _progress(steps, progress)
    clock = 0.0
    for _ in range(steps):
        x, y = (t.to(dev) for t in next(batches))
        synchronize(dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        synchronize(dev)
        t1 = time.perf_counter()
        loss.backward()
        synchronize(dev)
        t2 = time.perf_counter()
        opt.step()
        synchronize(dev)
        t3 = time.perf_counter()
        for kind, a, b in (("forward", t0, t1), ("backward", t1, t2), ("optimizer", t2, t3)):
            trace.add(Event(0, "compute", kind, clock + a - t0, clock + b - t0))
            phases[kind].append(b - a)
        clock += t3 - t0
        times.append(t3 - t0)
        losses.append(float(loss.detach()))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    if bar is not None:
        bar.close()
    phase_s = {k: statistics.median(v[1:] or v) for k, v in phases.items()}
    return TrainResult(str(dev), note, batch_size, optimizer, losses, times, memory, trace,
                       phase_s)


def _forever(loader: DataLoader[tuple[torch.Tensor, ...]]) -> Iterator[list[torch.Tensor]]:
    while True:
        yield from loader


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="training", unit="step")
