"""Chapter 3 exercises: DataParallel's scatter and gather, and device 0's extra memory
(3.5, DataParallel's whole forward by hand, is in `ch03_dp_forward`).

Reference answers come from torch itself (`Tensor.chunk`, `torch.cat`) and from
`dpsim.sim.strategies.dp`; each is cross-checked while the cases are built (a disagreement
is a bug in dpsim, raised as RuntimeError, never blamed on the learner).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.models import mlp
from dpsim.sim import DPConfig, device0_extra_bytes, scatter_sizes

FP32_BYTES = 4
INT64_BYTES = 8

# (batch_size, n_devices): uneven, batch smaller than N, fewer chunks than N, even, one device
_SHAPES = [(10, 4), (2, 4), (5, 4), (128, 4), (7, 1), (3, 8)]


def torch_chunk_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Sizes of the chunks `torch.arange(batch_size).chunk(n_devices)` returns."""
    return [int(c.shape[0]) for c in torch.arange(batch_size).chunk(n_devices)]


TORCH_SPLITS = ("chunk", "split", "tensor_split")  # torch's own splits answer 3.1 outright


def call_without_torch_splits(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` with torch.chunk/split/tensor_split (functions and Tensor methods) made
    tripwires: 3.1 asks for the rule, not for torch's answer (runs in the sandbox)."""
    from dpsim.course.grading.sandbox_worker import ForbiddenCall

    def wire(name: str) -> Callable[..., Any]:
        def tripwire(*_args: Any, **_kwargs: Any) -> Any:
            raise ForbiddenCall(name)
        return tripwire

    saved = [(owner, name, getattr(owner, name)) for owner in (torch, torch.Tensor)
             for name in TORCH_SPLITS]
    try:
        for owner, name, _ in saved:
            prefix = "torch" if owner is torch else "torch.Tensor"
            setattr(owner, name, wire(f"{prefix}.{name}"))
        return fn(*args)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _spread(batch: int, n: int) -> list[int]:
    return [batch // n + (r < batch % n) for r in range(n)]


@exercise("3.1", function="chunk_sizes", title="How DataParallel splits a batch", points=1,
          forbidden=("dpsim.sim.strategies.dp.scatter_sizes",))
def _chunk_size_cases(rng: random.Random) -> Iterator[Case]:
    shapes = [*_SHAPES, (rng.randint(11, 99), rng.randint(3, 8))]
    for batch, n in shapes:
        expected = torch_chunk_sizes(batch, n)
        if expected != scatter_sizes(batch, n):
            raise RuntimeError(f"dpsim.sim.strategies.dp.scatter_sizes disagrees with torch.chunk "
                               f"for batch {batch} on {n} devices; please report this")
        size = -(-batch // n)
        yield Case(
            f"chunk_sizes({batch}, {n})", args=(batch, n), expected=expected,
            call=call_without_torch_splits,
            mistakes={
                "you spread the remainder one sample at a time (numpy.array_split / "
                "torch.tensor_split); torch.chunk makes chunks of ceil(B/N) and the last "
                "one takes what is left": _spread(batch, n),
                "you dropped the remainder (B // N each)": [batch // n] * n,
                "you gave every device ceil(B/N) samples; the chunks must add up to the "
                "batch": [size] * n,
                "your chunks are in reverse order: the full chunks of ceil(B/N) come first, "
                "the smaller rest last": expected[::-1],
                "you kept empty chunks: torch.chunk returns fewer than N chunks when the "
                "batch runs out, and DataParallel uses only as many devices as chunks":
                    expected + [0] * (n - len(expected)) if len(expected) < n else None,
            },
        )


def _batch(rng: random.Random, batch: int) -> torch.Tensor:
    features = rng.randint(2, 5)
    return torch.arange(batch * features).reshape(batch, features) * rng.randint(1, 3)


@exercise("3.2", function="scatter", title="Scatter a batch like DataParallel", points=1)
def _scatter_cases(rng: random.Random) -> Iterator[Case]:
    for batch, n in [(10, 4), (2, 4), (6, 4), (9, 3)]:
        x = _batch(rng, batch)
        expected = [c.tolist() for c in x.chunk(n)]
        yield Case(
            f"scatter(x, {n}) with x = a {tuple(x.shape)} tensor", args=(x.clone(), n),
            expected=expected,
            mistakes={
                "you spread the remainder (torch.tensor_split); DataParallel uses "
                "torch.chunk": [c.tolist() for c in torch.tensor_split(x, n)],
                "the chunks are out of order: device d gets the d-th slice of the batch":
                    [c.tolist() for c in reversed(x.chunk(n))],
            },
        )


@exercise("3.3", function="gather", title="Gather the outputs on device 0", points=1)
def _gather_cases(rng: random.Random) -> Iterator[Case]:
    for batch, n in [(10, 4), (5, 4), (8, 2)]:
        out = torch.randn(batch, rng.randint(2, 4)).round(decimals=2)
        chunks = [c.clone() for c in out.chunk(n)]
        expected = torch.cat(chunks).tolist()
        if expected != out.tolist():
            raise RuntimeError("torch.cat of the chunks is not the original batch")
        sizes = [int(c.shape[0]) for c in chunks]
        yield Case(f"gather(outputs) with chunk sizes {sizes} of {out.shape[1]} values",
                   args=([c.clone() for c in chunks],), expected=expected,
                   mistakes={"the chunks are out of order: device 0's outputs come first":
                             torch.cat(chunks[::-1]).tolist()})


def reference_extra_bytes(batch_size: int, out_features: int, n_params: int,
                          n_param_tensors: int) -> int:
    """Device 0's extra bytes at the loss: Adam state + gathered outputs + loss's saves."""
    return (2 * FP32_BYTES * n_params + FP32_BYTES * n_param_tensors
            + FP32_BYTES * batch_size * out_features
            + FP32_BYTES * batch_size * out_features + INT64_BYTES * batch_size)


@exercise("3.4", function="device0_extra_bytes", title="What device 0 holds that others don't",
          points=2)
def _extra_cases(rng: random.Random) -> Iterator[Case]:
    for _ in range(3):
        n = rng.choice([2, 4, 8])
        batch = n * rng.randint(2, 16)
        hidden, classes = rng.randint(8, 64), rng.choice([10, 100, 1000])
        module = mlp(16, hidden, rng.randint(1, 3), classes)
        workload = workload_from_module(module, torch.randn(2, 16))
        p, t = workload.n_params, workload.n_param_tensors
        cfg = DPConfig(n_devices=n, batch_size=batch, optimizer="adam", input_on="host")
        expected = sum(device0_extra_bytes(workload, cfg).values())
        if expected != reference_extra_bytes(batch, classes, p, t):
            raise RuntimeError("dpsim.sim.strategies.dp.device0_extra_bytes disagrees with the "
                               "formula of exercise 3.4; please report this")
        gathered = FP32_BYTES * batch * classes
        loss = gathered + INT64_BYTES * batch
        adam = 2 * FP32_BYTES * p + FP32_BYTES * t
        yield Case(
            f"device0_extra_bytes(batch_size={batch}, out_features={classes}, "
            f"n_params={p}, n_param_tensors={t}) on {n} devices",
            args=(batch, classes, p, t), expected=expected,
            mistakes={
                "you left out the optimizer state: only device 0 steps, so only it keeps "
                "Adam's moments and step tensors": gathered + loss,
                "you forgot Adam's `step` tensors (4 bytes per parameter tensor)":
                    expected - FP32_BYTES * t,
                "you left out what the loss keeps for backward (log-softmax of every "
                "output and the int64 targets)": adam + gathered,
                "you left out the int64 targets the loss keeps": expected - INT64_BYTES * batch,
                "you counted the parameters or the gradients: device 1 holds a replica of "
                "the parameters too, and with zero_grad(set_to_none=True) there are no "
                "gradients yet when the loss is computed": expected + FP32_BYTES * p,
                "you counted only device 0's own chunk of the outputs; gather brings all of "
                "them": adam + (gathered + loss) // n,
            },
        )
