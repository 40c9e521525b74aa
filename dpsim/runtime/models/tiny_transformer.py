"""A small transformer-like model for chapter 9: pre-norm attention and MLP blocks.

Odd sizes (width 30, 3 heads, 13 input features) so FSDP2's dim-0 shards do not divide
evenly; built from a seed, no downloads.
"""

from __future__ import annotations

import torch
from torch import nn

from dpsim.sim import require_int

SEQ_LEN, IN_FEATURES, N_CLASSES = 6, 13, 5


class Block(nn.Module):
    """x + attention(LayerNorm(x)), then h + MLP(LayerNorm(h)); x: [batch, seq, width]."""

    def __init__(self, width: int = 30, n_heads: int = 3, hidden: int = 45) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.norm1, self.qkv = nn.LayerNorm(width), nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, seq, width] -> the same shape."""
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.n_heads, -1).unbind(2)
        a = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.out(a.transpose(1, 2).reshape(b, t, w))
        return h + self.mlp(self.norm2(h))


class TinyTransformer(nn.Module):
    """Input projection, `depth` blocks, a final LayerNorm and a per-position head."""

    def __init__(self, width: int = 30, depth: int = 2, n_heads: int = 3,
                 hidden: int = 45) -> None:
        super().__init__()
        require_int("width", width, 1, 1 << 14)
        require_int("depth", depth, 1, 64)
        require_int("n_heads", n_heads, 1, width)
        if width % n_heads:
            raise ValueError(f"n_heads={n_heads} does not divide width={width}; allowed: a "
                             "divisor of width")
        self.proj = nn.Linear(IN_FEATURES, width)
        self.blocks = nn.ModuleList(Block(width, n_heads, hidden) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, SEQ_LEN, IN_FEATURES] -> logits [batch * SEQ_LEN, N_CLASSES]."""
        h = self.proj(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h).flatten(0, 1))  # a new tensor, not a view


def tiny_transformer(seed: int = 0, **sizes: int) -> TinyTransformer:
    """The model, initialised from `seed`."""
    torch.manual_seed(seed)
    return TinyTransformer(**sizes)


def token_batch(batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic inputs [batch, SEQ_LEN, IN_FEATURES] and targets [batch * SEQ_LEN]."""
    require_int("batch", batch, 1, 1 << 16)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, SEQ_LEN, IN_FEATURES, generator=g)
    y = torch.randint(0, N_CLASSES, (batch * SEQ_LEN,), generator=g)
    return x, y
