"""A tiny recurrent model for chapter 4: many small operators per sample, so the GIL shows."""

from __future__ import annotations

import torch
from torch import nn

from dpsim.sim import require_int


class TinyRNN(nn.Module):
    """An RNN cell stepped in a Python loop: many tiny operators per sample."""

    def __init__(self, n_features: int = 8, hidden: int = 32, n_classes: int = 2) -> None:
        super().__init__()
        require_int("n_features", n_features, 1, 1 << 16)
        require_int("hidden", hidden, 1, 1 << 16)
        require_int("n_classes", n_classes, 1, 1 << 16)
        self.cell = nn.RNNCell(n_features, hidden)
        self.head = nn.Linear(hidden, n_classes)
        self.hidden = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, seq_len, n_features] -> logits [batch, n_classes]."""
        h = x.new_zeros(x.shape[0], self.hidden)
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        return self.head(h)
