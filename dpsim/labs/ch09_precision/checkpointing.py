"""Activation checkpointing measured: torch.utils.checkpoint around every residual block.

What is counted (bytes, by storage, parameters excluded, `measure.saved_tensors`):
* without checkpointing: everything autograd saves in the forward pass;
* with it: what the forward pass saves (each block's input, kept by checkpoint, and the
  loss's tensors) plus the largest block's recomputation, measured as what one plain
  forward of that block on its input saves (the tensors backward rebuilds at a time).
That sum is what `memory.checkpointed_activation_bytes` predicts from a Workload captured
with one Layer per block. The extra forward time is timed (fastest of interleaved repeats) and
simulated (backward + a second forward per block, `compute`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.measure import saved_tensors
from dpsim.runtime.models import BlockStack
from dpsim.sim import (
    Layer,
    Workload,
    backward_time_s,
    checkpointed_activation_bytes,
    cpu_device,
    forward_time_s,
    require_int,
)


def block_workload(model: BlockStack, x: torch.Tensor) -> Workload:
    """The model captured by its leaf layers (`capture`), then one Layer per block."""
    leaves = workload_from_module(model, x)
    layers = []
    for i in range(len(model.blocks)):
        mine = [lay for lay in leaves.layers if lay.name.startswith(f"blocks.{i}.")]
        layers.append(Layer(f"block {i}", "Block", sum(lay.n_params for lay in mine),
                            sum(lay.n_param_tensors for lay in mine),
                            sum(lay.activation_bytes for lay in mine), mine[-1].output_bytes,
                            sum(lay.flops for lay in mine)))
    return Workload("BlockStack", tuple(layers), leaves.dtype, leaves.input_bytes,
                    leaves.loss_bytes)


def saved_bytes(model: BlockStack, x: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    """(bytes the forward pass saves, largest one block's plain forward saves)."""
    with saved_tensors(model.parameters()) as saved:
        loss = nn.functional.cross_entropy(model(x), y)
    recompute, h = 0, x
    for block in model.blocks:
        with torch.no_grad():
            nxt = h + block(h)
        with saved_tensors(model.parameters()) as one:
            block(h.detach().requires_grad_(h.requires_grad))
        recompute, h = max(recompute, one.nbytes), nxt
    loss.backward()
    return saved.nbytes, recompute


def step_times_s(model: BlockStack, x: torch.Tensor, y: torch.Tensor, reps: int
                 ) -> tuple[float, float]:
    """(plain, checkpointed) forward + backward seconds: the fastest of `reps`, the two
    interleaved so that a busy machine slows both alike."""
    times: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps + 1):
        for ckpt in (False, True):
            model.checkpointed = ckpt
            t0 = time.perf_counter()
            nn.functional.cross_entropy(model(x), y).backward()
            if rep:  # the first round warms up, untimed
                times[ckpt].append(time.perf_counter() - t0)
    model.checkpointed = False
    return min(times[False]), min(times[True])


@dataclass
class CheckpointResult:
    """Activation bytes and step time with and without checkpointing, measured and simulated."""

    batch: int
    plain_bytes: int  # measured: saved by a forward without checkpointing
    plain_predicted: int  # Workload.activation_bytes
    kept_bytes: int  # measured with checkpointing: block inputs + loss, after forward
    recompute_bytes: int  # measured: the largest block's recomputation
    predicted: int  # memory.checkpointed_activation_bytes
    plain_step_s: float  # measured, fastest of reps
    checkpointed_step_s: float  # measured, fastest of reps
    simulated_ratio: float  # (forward + backward + forward) / (forward + backward), compute

    @property
    def measured(self) -> int:
        """kept_bytes + recompute_bytes: what the prediction is compared with."""
        return self.kept_bytes + self.recompute_bytes

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured

    @property
    def measured_ratio(self) -> float:
        """Checkpointed step time over plain step time, measured."""
        return self.checkpointed_step_s / self.plain_step_s


def measure_checkpointing(batch: int = 32, width: int = 64, hidden: int = 256, depth: int = 4,
                          reps: int = 5, seed: int = 0) -> CheckpointResult:
    """Measure one model with and without checkpointing, and dpsim's prediction of both."""
    require_int("batch", batch, 1, 1 << 14)
    require_int("reps", reps, 1, 100)
    torch.manual_seed(seed)
    model = BlockStack(width, hidden, depth)
    x, y = torch.randn(batch, width), torch.randint(0, width, (batch,))
    work = block_workload(model, x)
    plain, _ = saved_bytes(model, x, y)
    plain_s, ckpt_s = step_times_s(model, x, y, reps)
    model.checkpointed = True
    kept, recompute = saved_bytes(model, x, y)
    dev = cpu_device()
    f = sum(forward_time_s(lay, batch, dev) for lay in work.layers)
    b = sum(backward_time_s(lay, batch, dev) for lay in work.layers)
    return CheckpointResult(batch, plain, work.activation_bytes(batch), kept, recompute,
                            checkpointed_activation_bytes(work, batch), plain_s, ckpt_s,
                            (2 * f + b) / (f + b))
