"""Deterministic synthetic data, generated on the fly (nothing is downloaded)."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from dpsim.sim import require_int


def classification(
    n_samples: int = 1024, n_features: int = 32, n_classes: int = 10, seed: int = 0
) -> TensorDataset:
    """Gaussian clusters labelled by a random linear teacher: (x float32, y int64).

    Equal arguments give bit-identical tensors on every machine (CPU generator).
    """
    require_int("n_samples", n_samples, 1, 10_000_000)
    require_int("n_features", n_features, 1, 100_000)
    require_int("n_classes", n_classes, 2, 100_000)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, n_features, generator=g)
    teacher = torch.randn(n_features, n_classes, generator=g) / n_features**0.5
    noise = 0.1 * torch.randn(n_samples, n_classes, generator=g)
    y = (x @ teacher + noise).argmax(dim=1)
    return TensorDataset(x, y)


def sequences(
    n_samples: int = 256, seq_len: int = 16, n_features: int = 8, seed: int = 0
) -> TensorDataset:
    """Random sequences (float32, [n, seq_len, n_features]) whose label is the sign of their sum."""
    require_int("n_samples", n_samples, 1, 10_000_000)
    require_int("seq_len", seq_len, 1, 100_000)
    require_int("n_features", n_features, 1, 100_000)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, seq_len, n_features, generator=g)
    y = (x.sum(dim=(1, 2)) > 0).long()
    return TensorDataset(x, y)
