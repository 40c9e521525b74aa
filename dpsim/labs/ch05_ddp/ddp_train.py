"""A real DistributedDataParallel training run, and the one process it must agree with.

`train_rank` is the per-process training code (DistributedSampler with set_epoch, DDP,
a tqdm bar on rank 0); `run_ddp` launches it on N ranks (tests, scripts/record_gpu.py,
benchmarks). Chapter 5 writes its own loop in its cells, and the script it runs under
torchrun is scripts/train_ddp.py; the model and data builders here serve its recording
cell. `train_global_batch`
trains one process on the union of the ranks' batches: DDP must end with the same
parameters (up to float32 summation order).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dpsim.runtime import models
from dpsim.runtime.data import classification
from dpsim.runtime.models.cnn import image_side
from dpsim.runtime.optimizers import build_optimizer
from dpsim.sim import OPTIMIZERS, MiB, require_choice, require_int, require_range

MODELS = ("mlp", "cnn")


@dataclass(frozen=True)
class DDPRunConfig:
    """A small, seeded DDP run (every rank builds the same data and model from it)."""

    model: str = "mlp"  # "mlp" (Linear-ReLU stack) or "cnn" (convolutions on 3 x s x s)
    hidden: int = 64  # width of hidden layers (mlp) or channels (cnn)
    depth: int = 2  # hidden layers
    n_features: int = 48  # input features; the cnn reads them as 3 x 4 x 4 images
    n_classes: int = 10
    n_samples: int = 512  # size of the synthetic data set
    batch_size: int = 16  # per process: the global batch is batch_size * world_size
    steps: int = 8  # optimizer steps
    optimizer: str = "sgd"  # one of memory.OPTIMIZERS
    lr: float = 0.1
    seed: int = 0  # data, sampler shuffle and model initialisation
    seed_per_rank: bool = False  # initialise rank r with seed + r (DDP broadcasts rank 0's)
    bucket_cap_mb: float | None = None  # None: DDP's default (25 MiB, first bucket 1 MiB)
    progress: bool = True  # tqdm bar on rank 0

    def __post_init__(self) -> None:
        require_choice("model", self.model, MODELS)
        require_int("hidden", self.hidden, 1, 1 << 16)
        require_int("depth", self.depth, 0 if self.model == "mlp" else 1, 64)
        require_int("n_features", self.n_features, 1, 1 << 20)
        require_int("n_classes", self.n_classes, 2, 1 << 16)
        require_int("n_samples", self.n_samples, 1, 1 << 24)
        require_int("batch_size", self.batch_size, 1, self.n_samples)
        require_int("steps", self.steps, 1, 100_000)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_range("lr", self.lr, 0, low_inclusive=False)
        if self.bucket_cap_mb is not None:
            require_range("bucket_cap_mb", self.bucket_cap_mb, 0, low_inclusive=False)
        if self.model == "cnn" and image_side(self.n_features) is None:
            raise ValueError(f"n_features={self.n_features} is not 3 * s * s for model='cnn'; "
                             "allowed: 12, 27, 48, 75, 108, ...")

    def check_world_size(self, world_size: int) -> None:
        """Raise ValueError if a rank's share of the data holds no full batch."""
        require_int("world_size", world_size, 1)
        per_rank = -(-self.n_samples // world_size)
        if per_rank < self.batch_size:
            raise ValueError(f"batch_size={self.batch_size} is out of range for n_samples="
                             f"{self.n_samples} on {world_size} ranks; allowed <= {per_rank}")


def build_model(cfg: DDPRunConfig, seed: int | None = None) -> nn.Module:
    """The model `cfg` names at its sizes (`models.build_model`), initialised from `seed`
    (default cfg.seed)."""
    return models.build_model(cfg.model, seed=cfg.seed if seed is None else seed,
                              in_features=cfg.n_features, hidden=cfg.hidden, depth=cfg.depth,
                              n_classes=cfg.n_classes)


def build_dataset(cfg: DDPRunConfig) -> TensorDataset:
    """The synthetic classification data every rank generates identically."""
    return classification(cfg.n_samples, cfg.n_features, cfg.n_classes, seed=cfg.seed)


def param_checksum(module: nn.Module) -> float:
    """Sum of |p| over every parameter, in float64: equal models give equal sums."""
    return float(sum(p.detach().double().abs().sum().item() for p in module.parameters()))


def named_params(module: nn.Module) -> dict[str, np.ndarray]:
    """Parameter name -> a CPU numpy copy."""
    return {n: p.detach().cpu().numpy().copy() for n, p in module.named_parameters()}


@dataclass
class RankRun:
    """What one rank of a DDP run saw and ended with."""

    rank: int
    world_size: int
    backend: str
    losses: list[float]  # this rank's loss at each step (its own share of the batch)
    params: dict[str, np.ndarray]  # after the last step
    checksum_before_ddp: float  # of the model this rank built
    checksum_after_ddp: float  # right after DDP(model): rank 0's parameters everywhere
    checksum_final: float  # after the last step (equal on every rank)
    first_indices: list[int] = field(default_factory=list)  # samples of this rank's step 0
    epochs: int = 0  # epochs started (sampler.set_epoch calls)
    step_times_s: list[float] = field(default_factory=list)  # zero_grad to opt.step, per step


def train_rank(rank: int, world_size: int, cfg: DDPRunConfig) -> RankRun:
    """Train with DDP inside an initialised process group; return this rank's record."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    cfg.check_world_size(world_size)
    backend = dist.get_backend() if dist.is_initialized() else "none"
    device = torch.device(f"cuda:{torch.cuda.current_device()}" if backend == "nccl" else "cpu")
    dataset = build_dataset(cfg)
    model = build_model(cfg, cfg.seed + (rank if cfg.seed_per_rank else 0)).to(device)
    before = param_checksum(model)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=cfg.bucket_cap_mb)  # broadcasts rank 0's parameters
    after = param_checksum(ddp.module)
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler, drop_last=True)
    opt = build_optimizer(cfg.optimizer, ddp.parameters(), cfg.lr)
    bar = _progress_bar(cfg.steps, rank, world_size, cfg.progress)
    losses: list[float] = []
    times: list[float] = []
    first: list[int] = []
    epoch = 0
    while len(losses) < cfg.steps:
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        if epoch == 0:
            first = list(sampler)[: cfg.batch_size]
        epoch += 1
        for x, y in loader:
            xb, yb = x.to(device), y.to(device)
            t0 = _sync_clock(device)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(ddp(xb), yb)
            loss.backward()  # DDP all-reduces gradient buckets during backward
            opt.step()
            times.append(_sync_clock(device) - t0)
            losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if len(losses) == cfg.steps:
                break
    if bar is not None:
        bar.close()
    return RankRun(rank, world_size, backend, losses, named_params(ddp.module), before, after,
                   param_checksum(ddp.module), first, epoch, times)


def _sync_clock(device: torch.device) -> float:
    """time.perf_counter() once `device`'s queued work is done (a CUDA step is timed whole)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _progress_bar(total: int, rank: int, world_size: int, enabled: bool) -> Any:
    if not enabled or rank != 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"rank 0 of {world_size}", unit="step", file=sys.stderr)


@dataclass
class DDPRun:
    """A finished DDP run: one RankRun per rank."""

    config: DDPRunConfig
    ranks: list[RankRun]

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.ranks)

    @property
    def losses(self) -> np.ndarray:
        """[world_size, steps] losses, each rank on its own share of the batch."""
        return np.array([r.losses for r in self.ranks])

    def max_rank_difference(self) -> float:
        """Largest |difference| of any parameter between rank 0 and another rank."""
        return max((max_param_difference(self.ranks[0].params, r.params)
                    for r in self.ranks[1:]), default=0.0)


def run_ddp(cfg: DDPRunConfig | None = None, world_size: int = 2, *, backend: str = "auto",
            timeout_s: float = 120.0) -> DDPRun:
    """Launch `train_rank` on `world_size` ranks (gloo on CPU, NCCL with a GPU per rank)."""
    from dpsim.runtime.launch import launch

    cfg = cfg or DDPRunConfig()
    cfg.check_world_size(world_size)
    ranks = launch(train_rank, world_size, args=(cfg,), backend=backend, timeout_s=timeout_s)
    return DDPRun(cfg, ranks)


@dataclass
class SingleRun:
    """One process trained on the global batch of a DDP run."""

    losses: list[float]  # loss on the global batch at each step
    params: dict[str, np.ndarray]


def global_batches(cfg: DDPRunConfig, world_size: int, epoch: int) -> list[list[int]]:
    """Sample indices of every global batch of `epoch`: rank 0's batch, then rank 1's, ..."""
    n = len(build_dataset(cfg))
    per_rank = []
    for rank in range(world_size):
        sampler: DistributedSampler[int] = DistributedSampler(
            range(n), num_replicas=world_size, rank=rank, shuffle=True,  # type: ignore[arg-type]
            seed=cfg.seed)
        sampler.set_epoch(epoch)
        per_rank.append(list(sampler))
    steps = len(per_rank[0]) // cfg.batch_size
    b = cfg.batch_size
    return [[i for rank in range(world_size) for i in per_rank[rank][s * b:(s + 1) * b]]
            for s in range(steps)]


def train_global_batch(cfg: DDPRunConfig, world_size: int) -> SingleRun:
    """Train one process (no process group) on the union of the ranks' batches."""
    cfg.check_world_size(world_size)
    dataset = build_dataset(cfg)
    x_all, y_all = dataset.tensors
    model = build_model(cfg)
    opt = build_optimizer(cfg.optimizer, model.parameters(), cfg.lr)
    losses: list[float] = []
    epoch = 0
    while len(losses) < cfg.steps:
        for idx in global_batches(cfg, world_size, epoch):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if len(losses) == cfg.steps:
                break
        epoch += 1
    return SingleRun(losses, named_params(model))


def max_param_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """Largest |a - b| over parameters of equal names (ValueError if the names differ)."""
    if a.keys() != b.keys():
        raise ValueError(f"parameter names differ: {sorted(a)} vs {sorted(b)}")
    return max((float(np.max(np.abs(a[k] - b[k]))) for k in a), default=0.0)


def bucket_caps_mb(ddp: Any) -> tuple[float, float]:
    """(bucket_cap_mb, first_bucket_cap_mb) a live DDP module builds its buckets with.

    PyTorch uses a 1 MiB first bucket only when bucket_cap_mb was left at its default.
    """
    config = getattr(ddp, "_bucket_config", None)
    if config is not None:
        return config.bucket_bytes_cap / MiB, config.first_bucket_bytes_cap / MiB
    cap = ddp.bucket_bytes_cap / MiB
    default = getattr(ddp, "bucket_bytes_cap_default", True)
    return cap, (dist._DEFAULT_FIRST_BUCKET_BYTES / MiB if default else cap)


def usable_cores() -> int:
    """CPU cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
