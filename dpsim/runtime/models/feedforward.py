"""Feed-forward stacks of Linear layers: `layer_stack` over a list of widths, and `mlp`.

The kit's plainest models (chapters 1, 3, 5, 8 and 9, and the exercises' models): Linear
layers, with an activation (and optionally a LayerNorm) between them, built in order so that
equal RNG states give equal parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import torch
from torch import nn

from dpsim.sim import require_bool, require_choice, require_int, require_type

ACTIVATIONS: dict[str, type[nn.Module] | None] = {
    "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "none": None}


def layer_stack(widths: Sequence[int], *, activation: str = "relu", norm: bool = False,
                bias: bool = True, after_last: bool = False) -> nn.Sequential:
    """Linear(w0, w1), [LayerNorm(w1)], activation, ..., Linear(w_{k-1}, w_k).

    `norm` puts a LayerNorm after each Linear, before its activation; `after_last` ends the
    stack with them too. Not seeded: the Linear layers draw from torch's RNG as it stands,
    in order (`build_model("stack", seed=...)` seeds it first).
    """
    require_type("widths", widths, (list, tuple))
    require_int("len(widths)", len(widths), 2, 1 << 16)
    for i, width in enumerate(widths):
        require_int(f"widths[{i}]", width, 1)
    require_choice("activation", activation, ACTIVATIONS)
    for field, flag in (("norm", norm), ("bias", bias), ("after_last", after_last)):
        require_bool(field, flag)
    return _stack(widths, activation, norm, bias, after_last)


def mlp(in_features: int = 32, hidden: int = 256, depth: int = 3, n_classes: int = 10,
        seed: int | None = 0) -> nn.Sequential:
    """Linear-ReLU stack: `depth` hidden layers of width `hidden`, initialised from `seed`.

    seed=None leaves torch's RNG as it stands (what `build_model("mlp", seed=...)` does
    after seeding it).
    """
    require_int("in_features", in_features, 1)
    require_int("hidden", hidden, 1)
    require_int("depth", depth, 0, 1000)
    require_int("n_classes", n_classes, 1)
    if seed is not None:
        torch.manual_seed(seed)
    return _stack([in_features, *[hidden] * depth, n_classes], "relu", False, True, False)


def _stack(widths: Sequence[int], activation: str, norm: bool, bias: bool,
           after_last: bool) -> nn.Sequential:
    act = ACTIVATIONS[activation]
    layers: list[nn.Module] = []
    last = len(widths) - 2
    for i, (a, b) in enumerate(pairwise(widths)):
        layers.append(nn.Linear(a, b, bias=bias))
        if i < last or after_last:
            if norm:
                layers.append(nn.LayerNorm(b))
            if act is not None:
                layers.append(act())
    return nn.Sequential(*layers)
