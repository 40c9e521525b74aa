"""Build the torch optimizer named by dpsim's vocabulary (see memory.OPTIMIZERS)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dpsim.sim import OPTIMIZERS, require_choice, require_range


def build_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float = 1e-3
                    ) -> torch.optim.Optimizer:
    """"sgd", "sgd_momentum" (0.9), "adam" or "adamw" over `params` with learning rate `lr`."""
    require_choice("optimizer", name, OPTIMIZERS)
    require_range("lr", lr, 0, low_inclusive=False)
    # foreach=False keeps one plain state tensor per parameter, which is what dpsim counts
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, foreach=False)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=False)
    return torch.optim.AdamW(params, lr=lr, foreach=False)
