"""The data chapter 13's runs train on: the same on every rank, generated from a seed.

`regression_dataset` is the global-batch and learning-rate run's data set (section 1);
`token_batches` gives each rank a batch of padded token sequences of its own lengths, so the
ranks hold different numbers of real tokens (section 2).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from dpsim.sim import require_int

PAD = -100  # the target of a padding position: cross_entropy's default ignore_index


def regression_dataset(n_samples: int = 1024, n_features: int = 16, seed: int = 0
                       ) -> TensorDataset:
    """`n_samples` inputs of `n_features` and a noisy non-linear target of each, shape [n, 1]."""
    require_int("n_samples", n_samples, 1)
    require_int("n_features", n_features, 1)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, n_features, generator=g)
    w = torch.randn(n_features, 1, generator=g) / n_features ** 0.5
    y = x @ w + 0.1 * torch.randn(n_samples, 1, generator=g)
    return TensorDataset(x, y)


def token_batches(world_size: int, seed: int = 0, *, sequences: int = 4, n_features: int = 8,
                  vocab: int = 12, lengths: tuple[tuple[int, int], ...] = ((2, 5), (8, 16))
                  ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per rank: inputs [sequences, T_r, n_features] and targets [sequences, T_r], each
    sequence padded (target `PAD`) to the rank's longest. Rank r draws its lengths from
    `lengths[r % len(lengths)]` (inclusive), so ranks hold different numbers of tokens."""
    require_int("world_size", world_size, 1)
    g = torch.Generator().manual_seed(seed)
    out = []
    for rank in range(world_size):
        lo, hi = lengths[rank % len(lengths)]
        lens = torch.randint(lo, hi + 1, (sequences,), generator=g)
        t = int(lens.max())
        x = torch.randn(sequences, t, n_features, generator=g)
        y = torch.randint(0, vocab, (sequences, t), generator=g)
        y[torch.arange(t)[None, :] >= lens[:, None]] = PAD
        out.append((x, y))
    return out
