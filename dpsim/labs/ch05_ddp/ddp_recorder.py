"""Record a real DDP step as a measured Trace: its buckets, their all-reduces, backward.

`DDPRecorder` (dpsim.runtime.ddp_step_recorder) attaches to a DistributedDataParallel
module: a communication hook stamps when each bucket's all-reduce starts and completes,
and a post-accumulate-grad hook on every parameter stamps when its gradient is ready.

`record_ddp` launches ranks that train a few steps with the recorder, optionally measure
this machine (achieved FLOP/s per rank, gloo all-reduce alpha and beta, DDP's own host
work per step), and returns the median step of every rank. Times are host clock seconds
from the start of the step; on GPUs they are the times the host saw (launches and
completions), not kernel times.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from dpsim.labs.ch05_ddp.ddp_train import (
    DDPRunConfig,
    bucket_caps_mb,
    build_dataset,
    build_model,
    usable_cores,
)
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.ddp_step_recorder import DDPRecorder as DDPRecorder
from dpsim.runtime.ddp_step_recorder import ObservedBucket as ObservedBucket
from dpsim.runtime.ddp_step_recorder import step_events as step_events
from dpsim.runtime.device_calibration import calibrate_device
from dpsim.runtime.link_calibration import LINK_SIZES as LINK_SIZES
from dpsim.runtime.link_calibration import measure_link as measure_link
from dpsim.runtime.optimizers import build_optimizer
from dpsim.sim import (
    Bucket,
    Cluster,
    DDPConfig,
    Device,
    Event,
    Link,
    Trace,
    Workload,
    build_buckets,
    comm_overlaps_compute,
    grad_tensors,
    require_int,
    simulate,
    step_result,
)


def param_nbytes(module: nn.Module) -> list[tuple[str, int]]:
    """(name, bytes) of every parameter that needs a gradient, in model order."""
    return [(n, p.numel() * p.element_size()) for n, p in module.named_parameters()
            if p.requires_grad]


def gradient_ready_order(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[str]:
    """Parameter names in the order one local backward makes their gradients ready.

    This is the order DDP rebuilds its buckets in after its first iteration. Runs on a
    copy of `module`, so the module itself is untouched.
    """
    model = copy.deepcopy(module)
    order: list[str] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda _, name=name: order.append(name))
    nn.functional.cross_entropy(model(x), y).backward()
    return order


@dataclass
class RankRecording:
    """One rank's recorded steps."""

    rank: int
    step_times_s: list[float]
    steps: list[list[Event]]  # events per recorded step ([] when not recording)
    buckets: list[ObservedBucket]
    caps_mb: tuple[float, float]  # (bucket_cap_mb, first_bucket_cap_mb) DDP used
    device: Device | None = None  # calibrated on this rank, when asked
    link: Link | None = None  # fitted from timed all-reduces, when asked
    threads: int = 1  # this rank's intra-op threads (torch.get_num_threads())
    cores: int = 1  # CPU cores this rank may run on (its affinity)
    step_overhead_s: float = 0.0  # DDP's per-step host work, when calibrated


def timed_step(ddp: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               recorder: DDPRecorder | None, keep: bool = True) -> float:
    """One synchronised training step; return its seconds and, if `keep`, record it."""
    dist.barrier()
    if recorder is not None:
        recorder.begin()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(ddp(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    if recorder is not None and keep:
        recorder.end(t1, t2, t3)
    return t3 - t0


def record_rank(rank: int, world_size: int, cfg: DDPRunConfig, warmup: int = 3,
                record: bool = True, calibrate: bool = False) -> RankRecording:
    """Train `cfg.steps` timed steps after `warmup` (DDP rebuilds its buckets in step 2)."""
    device = link = None
    overhead_s = 0.0
    if calibrate:
        link = measure_link()
        device = calibrate_device("cpu")
        overhead_s = measure_ddp_step_overhead_s(rank, world_size, device, link)
    return train_recorded(rank, cfg, warmup, record, device, link, overhead_s)


def train_recorded(rank: int, cfg: DDPRunConfig, warmup: int, record: bool,
                   device: Device | None, link: Link | None, overhead_s: float
                   ) -> RankRecording:
    """The timed DDP steps of `record_rank`, with the calibration it already made.

    Kept apart from `record_rank` so that the overhead measurement, which trains too, does
    not call back into it (dill ships launched functions with their globals, recursively,
    and a call cycle between module functions makes that recursion endless).
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = build_model(cfg)
    ddp = DDP(model, bucket_cap_mb=cfg.bucket_cap_mb)
    recorder = DDPRecorder(ddp) if record else None
    opt = build_optimizer(cfg.optimizer, ddp.parameters(), cfg.lr)
    x, y = build_dataset(cfg).tensors
    x = x[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
    y = y[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
    times: list[float] = []
    for step in range(warmup + cfg.steps):
        step_s = timed_step(ddp, opt, x, y, recorder, keep=step >= warmup)
        if step >= warmup:
            times.append(step_s)
    buckets = sorted(recorder.buckets.values(), key=lambda b: b.index) if recorder else []
    steps = recorder.steps if recorder else []
    return RankRecording(rank, times, steps, buckets, bucket_caps_mb(ddp), device, link,
                         torch.get_num_threads(), usable_cores(), overhead_s)


@dataclass
class DDPRecording:
    """A recorded DDP run: every rank's steps, and the median step as a Trace."""

    config: DDPRunConfig
    ranks: list[RankRecording]
    world_size: int = field(init=False)

    def __post_init__(self) -> None:
        self.world_size = len(self.ranks)

    @property
    def step_time_s(self) -> float:
        """Median step time of rank 0, seconds."""
        return statistics.median(self.ranks[0].step_times_s)

    @property
    def buckets(self) -> list[ObservedBucket]:
        """The buckets rank 0's DDP built (after its rebuild)."""
        return self.ranks[0].buckets

    def trace(self) -> Trace:
        """The step whose time on rank 0 is the median, on every rank (source="measured")."""
        times = self.ranks[0].step_times_s
        index = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
        trace = Trace("measured", meta={"strategy": "ddp", "world_size": self.world_size,
                                        "step": index, "step_time_s": times[index]})
        for r in self.ranks:
            if r.steps:
                trace.events.extend(r.steps[index])
        return trace

    def _model_and_batch(self) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
        model = build_model(self.config)
        x, y = (t[: self.config.batch_size] for t in build_dataset(self.config).tensors)
        return model, x, y

    def predicted_buckets(self) -> list[Bucket]:
        """DDP's bucket rule applied to this model: its parameter sizes, in the order one
        local backward makes their gradients ready, with the caps the real DDP used."""
        model, x, y = self._model_and_batch()
        cap, first = self.ranks[0].caps_mb
        tensors = grad_tensors(Workload("model", ()), names=param_nbytes(model))
        return build_buckets(tensors, cap, first, gradient_ready_order(model, x, y))

    def overlaps(self, device: Device) -> bool:
        """Whether this run's all-reduces can hide behind backward on `device`
        (`dpsim.sim.cost.compute_contention`: on a CPU, only with a spare core per rank)."""
        r = self.ranks[0]
        return comm_overlaps_compute(device.kind, r.cores, self.world_size, r.threads)

    def predict(self, device: Device | None = None, link: Link | None = None,
                overlap: bool | None = None, step_overhead_s: float | None = None) -> Trace:
        """Simulate this run's step with its real buckets, calibrated (or given) hardware.

        `overlap`: whether the all-reduces run behind backward; None: `overlaps(device)`
        (all ranks on one host, as `record_ddp` launches them). `step_overhead_s`: DDP's
        host work per step that dpsim.sim.strategies.ddp does not model (seconds; None: what
        the run calibrated, `measure_ddp_step_overhead_s`), added at the end.
        """
        device = device or self.ranks[0].device
        link = link or self.ranks[0].link
        if device is None or link is None:
            raise ValueError("device=None or link=None and the run was not calibrated; "
                             "record with calibrate=True or pass a Device and a Link")
        model, x, y = self._model_and_batch()
        workload = workload_from_module(model, x)
        cap, first = self.ranks[0].caps_mb
        cfg = DDPConfig(batch_size=self.config.batch_size, bucket_cap_mb=cap,
                        first_bucket_cap_mb=first, optimizer=self.config.optimizer,
                        overlap=self.overlaps(device) if overlap is None else overlap)
        cluster = Cluster(f"this machine ({self.world_size} ranks)", device, self.world_size,
                          1, link)
        tensors = grad_tensors(workload, names=param_nbytes(model))
        trace = simulate(workload, cluster, cfg, tensors=tensors,
                         ready_order=gradient_ready_order(model, x, y))
        extra = self.ranks[0].step_overhead_s if step_overhead_s is None else step_overhead_s
        if extra > 0:
            end = max(e.end_s for e in trace.events)
            trace.add(Event(0, "compute", "ddp_host", end, end + extra, label="DDP host work"))
            trace.meta["step_time_s"] = end + extra
        return trace


def measure_ddp_step_overhead_s(rank: int, world_size: int, device: Device, link: Link,
                                steps: int = 40) -> float:
    """Seconds per step DDP's host work adds beyond what dpsim.sim.strategies.ddp simulates.

    Call on every rank of a gloo group. A tiny model (one hidden layer of 4, batch 2:
    compute and bytes ~ 0) trains `steps` DDP steps; the fastest step of rank 0 minus the
    simulated one (calibrated `device` and `link`) is the per-step work of DDP itself
    (its forward and backward bookkeeping in Python and the reducer), broadcast to every
    rank. Clamped at 0.
    """
    require_int("steps", steps, 1, 10_000)
    tiny = DDPRunConfig(hidden=4, depth=1, n_features=4, n_samples=64, batch_size=2,
                        steps=steps, progress=False)
    run = train_recorded(rank, tiny, warmup=3, record=False, device=None, link=None,
                         overhead_s=0.0)
    predicted = step_result(DDPRecording(tiny, [run] * world_size).predict(
        device, link, step_overhead_s=0.0)).step_s
    extra = torch.tensor([max(min(run.step_times_s) - predicted, 0.0)], dtype=torch.float64)
    dist.broadcast(extra, 0)
    return float(extra.item())


def record_ddp(cfg: DDPRunConfig | None = None, world_size: int = 2, *, warmup: int = 3,
               record: bool = True, calibrate: bool = False, timeout_s: float = 120.0
               ) -> DDPRecording:
    """Launch `record_rank` on `world_size` gloo ranks and collect the recordings."""
    from dpsim.runtime.launch import launch

    cfg = cfg or DDPRunConfig(steps=10, progress=False)
    require_int("world_size", world_size, 1)
    require_int("warmup", warmup, 2)
    ranks = launch(record_rank, world_size, args=(cfg, warmup, record, calibrate),
                   backend="gloo", timeout_s=timeout_s)
    return DDPRecording(cfg, ranks)
