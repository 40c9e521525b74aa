"""Chapter 1 exercises: memory of single-device training (1.1 to 1.3 here; 1.4, a step
under autocast, and 1.5, activation checkpointing, in `ch01_autocast_checkpoint`).

Reference answers come from `dpsim.sim.cost.memory` and `dpsim.sim.workload`, and each is confirmed
on real tensors while the cases are built (a disagreement is a bug in dpsim, raised as
RuntimeError, never blamed on the learner).
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.measure import optimizer_tensors, saved_tensors, storage_bytes
from dpsim.runtime.models import layer_stack
from dpsim.sim import Layer, Workload, max_batch_size, model_state_bytes

FP32_BYTES = 4
INT64_BYTES = 8
MOMENTS = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


def _describe(widths: list[int], bias: bool) -> str:
    parts = []
    for i in range(len(widths) - 1):
        parts.append(f"Linear({widths[i]}, {widths[i + 1]}{'' if bias else ', bias=False'})")
        if i < len(widths) - 2:
            parts.append("ReLU()")
    return f"nn.Sequential({', '.join(parts)})"


def make_optimizer(name: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """The torch optimizer each exercise name stands for."""
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9 if name == "sgd_momentum" else 0.0)


def measured_state_bytes(module: nn.Module, optimizer: str) -> int:
    """Bytes of parameters, gradients and optimizer state after one real step (on a copy)."""
    model = copy.deepcopy(module)
    opt = make_optimizer(optimizer, list(model.parameters()))
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    x = torch.randn(4, first.in_features)
    y = torch.randint(0, last.out_features, (4,))
    F.cross_entropy(model(x), y).backward()
    opt.step()
    params = list(model.parameters())
    return storage_bytes([*params, *(p.grad for p in params if p.grad is not None),
                          *optimizer_tensors(opt)])


@exercise("1.1", function="training_state_bytes", title="Bytes of the training state",
          points=2)
def _training_state_cases(rng: random.Random) -> Iterator[Case]:
    names = ["sgd", "sgd_momentum", "adam"]
    rng.shuffle(names)
    for name in names:
        widths = [rng.randint(3, 40) for _ in range(rng.randint(2, 4))]
        bias = rng.random() < 0.6
        module = layer_stack(widths, bias=bias)
        n = sum(p.numel() for p in module.parameters())
        t = len(list(module.parameters()))
        expected = model_state_bytes(n, t, optimizer=name).model_states
        measured = measured_state_bytes(module, name)
        if measured != expected:
            raise RuntimeError(f"dpsim.sim.cost.memory ({expected} B) disagrees with real tensors "
                               f"({measured} B) for {name}; please report this")
        m = MOMENTS[name]
        steps = FP32_BYTES * t if name == "adam" else 0
        yield Case(
            f"module = {_describe(widths, bias)}, optimizer = {name!r}",
            args=(module, name), expected=expected,
            mistakes={
                "you forgot the gradients: every parameter has a gradient of the same size":
                    expected - FP32_BYTES * n,
                "you left out the optimizer state (momentum buffer, Adam's two moments)":
                    2 * FP32_BYTES * n,
                "you counted only the parameters (gradients and optimizer state are memory "
                "too)": FP32_BYTES * n,
                "you counted elements, not bytes: an fp32 number takes 4 bytes":
                    (2 + m) * n + steps // FP32_BYTES,
                "you counted elements, not bytes (and forgot the step tensors)": (2 + m) * n,
                "you forgot Adam's `step` tensors (one float32 per parameter tensor)":
                    expected - steps,
                "you counted `step` as 8 bytes; torch.optim.Adam keeps it as float32":
                    expected + steps,
                "you counted one `step` per parameter element, not per parameter tensor":
                    expected - steps + FP32_BYTES * n if name == "adam" else None,
                "you gave plain SGD a momentum buffer; without momentum it keeps no state":
                    3 * FP32_BYTES * n if name == "sgd" else None,
                "you counted one Adam moment; Adam keeps two (exp_avg and exp_avg_sq)":
                    expected - FP32_BYTES * n if name == "adam" else None,
                "you counted bits, not bytes": 8 * expected,
            },
        )


def rule_activation_bytes(batch_size: int, widths: list[int]) -> int:
    """Bytes kept for backward by layer_stack(widths) + cross-entropy (0-dim scalars left out)."""
    return FP32_BYTES * batch_size * sum(widths) + INT64_BYTES * batch_size


def measured_activation_bytes(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes of the unique storages autograd saves in forward + cross-entropy.

    Parameters and 0-dim tensors (nll_loss's 4-byte `total_weight`) are left out.
    """
    with saved_tensors(module.parameters(), scalars=False) as saved:
        loss = F.cross_entropy(module(x), y)
    del loss
    return saved.nbytes


@exercise("1.2", function="mlp_activation_bytes", title="Activation bytes of an MLP",
          points=2)
def _activation_cases(rng: random.Random) -> Iterator[Case]:
    for depth in (3, 1, 4):  # number of Linear layers
        batch = rng.randint(2, 64)
        widths = [rng.randint(2, 64) for _ in range(depth + 1)]
        module = layer_stack(widths)
        x = torch.randn(batch, widths[0])
        y = torch.randint(0, widths[-1], (batch,))
        expected = rule_activation_bytes(batch, widths)
        simulated = workload_from_module(module, x).activation_bytes(batch)
        measured = measured_activation_bytes(module, x, y)
        if not expected == simulated == measured:
            raise RuntimeError(f"activation bytes disagree for {widths}, batch {batch}: rule "
                               f"{expected}, workload {simulated}, measured {measured}")
        b = batch
        hidden = sum(widths[1:-1])
        n_params = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(depth))
        yield Case(
            f"mlp_activation_bytes({batch}, {widths})", args=(batch, list(widths)),
            expected=expected,
            mistakes={
                "you counted each ReLU output twice; it is also the next Linear's input: "
                "one tensor, kept once": expected + FP32_BYTES * b * hidden,
                "you left out the loss (log-softmax of the logits and the int64 targets)":
                    expected - FP32_BYTES * b * widths[-1] - INT64_BYTES * b,
                "you left out the int64 targets the loss keeps": expected - INT64_BYTES * b,
                "you took the targets as 4-byte integers; class labels are int64 (8 bytes)":
                    expected - 4 * b,
                "you left out the first Linear's input (the batch itself is kept for the "
                "weight gradient)": expected - FP32_BYTES * b * widths[0],
                "you counted the logits as well as their log-softmax (the last Linear keeps "
                "only its input)": expected + FP32_BYTES * b * widths[-1],
                "you counted nll_loss's 4-byte `total_weight` scalar; this exercise leaves "
                "0-dim scalars out": expected + 4,
                "you counted the parameters; they are not activations":
                    expected + FP32_BYTES * n_params,
                "you counted elements, not bytes (fp32 = 4 bytes, int64 = 8 bytes)":
                    b * sum(widths) + b,
                "you computed one sample; multiply by batch_size": expected // b,
                "you counted bits, not bytes": 8 * expected,
            },
        )


def reference_largest_batch(n_params: int, activation_bytes_per_sample: int,
                            memory_bytes: int, bytes_per_param: int = 16) -> int:
    """dpsim.sim.cost.memory.max_batch_size on a one-layer workload with these numbers."""
    optimizer = {8: "sgd", 12: "sgd_momentum", 16: "adam"}[bytes_per_param]
    workload = Workload("model", (Layer("model", "Model", n_params, 0,
                                        activation_bytes_per_sample, 0, 0.0),))
    return max_batch_size(workload, memory_bytes, optimizer=optimizer, limit=1 << 62)


@exercise("1.3", function="largest_batch", title="The largest batch that fits", points=1)
def _largest_batch_cases(rng: random.Random) -> Iterator[Case]:
    gib = 1 << 30
    for kind in ("default", "explicit", "exact", "too_big"):
        bpp = rng.choice([8, 12]) if kind == "explicit" else 16
        memory = rng.choice([16, 24, 40, 80]) * gib
        per_sample = rng.randint(1 << 20, 400 << 20)
        states_max = memory // bpp
        n = rng.randint(states_max // 8, states_max // 2)
        if kind == "exact":
            memory = n * bpp + rng.randint(2, 60) * per_sample
        elif kind == "too_big":
            n = rng.randint(states_max + 1, 2 * states_max)
        elif (memory - n * bpp) % per_sample == 0:
            memory += 1
        expected = reference_largest_batch(n, per_sample, memory, bpp)
        if expected != (0 if n * bpp > memory else (memory - n * bpp) // per_sample):
            raise RuntimeError("dpsim.sim.cost.memory.max_batch_size disagrees with its formula")
        states = n * bpp
        args = (n, per_sample, memory)
        kwargs = {"bytes_per_param": bpp} if kind == "explicit" else {}
        call = f"largest_batch({n}, {per_sample}, {memory}" + (
            f", bytes_per_param={bpp})" if kwargs else ")")
        yield Case(
            call, args=args, kwargs=kwargs, expected=expected,
            mistakes={
                "you forgot the model states (parameters, gradients, optimizer state) that "
                "take memory before any activation": memory // per_sample,
                "you rounded up; a batch that does not fit completely is too big":
                    math.ceil((memory - states) / per_sample) if states <= memory else None,
                "an off-by-one: a batch that exactly fills the memory fits":
                    expected - 1 if kind == "exact" else None,
                "you ignored bytes_per_param (it is not always 16)":
                    (memory - 16 * n) // per_sample if kind == "explicit" else None,
                "a negative batch size cannot be right: what fits when the model states "
                "alone exceed the memory?": (memory - states) // per_sample
                if states > memory else None,
            },
        )
