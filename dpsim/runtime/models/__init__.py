"""Small models the chapters train for real (built from seeds, no downloads)."""

from __future__ import annotations

import torch
from torch import nn

from dpsim.sim.validation import require_int


def mlp(in_features: int = 32, hidden: int = 256, depth: int = 3, n_classes: int = 10,
        seed: int = 0) -> nn.Sequential:
    """Linear-ReLU stack: `depth` hidden layers of width `hidden`, seeded initialisation."""
    require_int("in_features", in_features, 1)
    require_int("hidden", hidden, 1)
    require_int("depth", depth, 0, 1000)
    require_int("n_classes", n_classes, 1)
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


class TinyRNN(nn.Module):
    """An RNN cell stepped in a Python loop: many tiny operators per sample."""

    def __init__(self, n_features: int = 8, hidden: int = 32, n_classes: int = 2) -> None:
        super().__init__()
        require_int("hidden", hidden, 1)
        self.cell = nn.RNNCell(n_features, hidden)
        self.head = nn.Linear(hidden, n_classes)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, seq_len, n_features] -> logits [batch, n_classes]."""
        h = x.new_zeros(x.shape[0], self.hidden)
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return self.head(h)
