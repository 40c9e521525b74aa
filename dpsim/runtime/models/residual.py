"""Pre-norm residual MLP blocks, h + (LayerNorm, Linear, GELU, Linear)(h), and two stacks of them.

`ResidualMLP` (chapter 6's FSDP lab, chapters 8 and 10) puts a projection before the blocks
and a LayerNorm and a head after them; `BlockStack` (chapter 9's activation checkpointing) is
the blocks alone, each optionally run under `torch.utils.checkpoint`. Both keep the blocks in
`self.blocks` (an `nn.ModuleList`): the units FSDP shards and checkpointing wraps.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dpsim.sim import require_bool, require_int


def prenorm_block(width: int, hidden: int) -> nn.Sequential:
    """LayerNorm(width), Linear(width, hidden), GELU, Linear(hidden, width): one residual branch."""
    return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(),
                         nn.Linear(hidden, width))


def run_blocks(blocks: nn.ModuleList, h: torch.Tensor, checkpointed: bool = False
               ) -> torch.Tensor:
    """h + block(h) for each block in turn, under `checkpoint` when `checkpointed`."""
    for block in blocks:
        h = h + (checkpoint(block, h, use_reentrant=False) if checkpointed else block(h))
    return h


class ResidualMLP(nn.Module):
    """A projection, pre-norm residual blocks (LayerNorm, Linear, GELU, Linear), a head.

    The default sizes are odd (13 features, width 30, 5 classes) so that FSDP's dim-0 shards
    do not divide evenly.
    """

    def __init__(self, in_features: int = 13, width: int = 30, hidden: int = 45,
                 depth: int = 2, n_classes: int = 5) -> None:
        super().__init__()
        for field, value in (("in_features", in_features), ("width", width),
                             ("hidden", hidden), ("depth", depth), ("n_classes", n_classes)):
            require_int(field, value, 1, 1 << 16)
        self.proj = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList(prenorm_block(width, hidden) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, in_features] -> logits [batch, n_classes]."""
        return self.head(self.norm(run_blocks(self.blocks, self.proj(x))))


class BlockStack(nn.Module):
    """`depth` residual blocks h + (LayerNorm, Linear, GELU, Linear)(h); classes = width."""

    def __init__(self, width: int = 64, hidden: int = 256, depth: int = 4,
                 checkpointed: bool = False) -> None:
        super().__init__()
        require_int("width", width, 1, 1 << 14)
        require_int("hidden", hidden, 1, 1 << 16)
        require_int("depth", depth, 1, 256)
        require_bool("checkpointed", checkpointed)
        self.checkpointed = checkpointed
        self.blocks = nn.ModuleList(prenorm_block(width, hidden) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, width] -> logits [batch, width]."""
        return run_blocks(self.blocks, x, self.checkpointed)
