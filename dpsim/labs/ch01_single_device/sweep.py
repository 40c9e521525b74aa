"""Real runs over several batch sizes: memory measured and step time timed at each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn
from torch.utils.data import TensorDataset

from dpsim.labs.ch01_single_device.train_single import TrainResult, train


def batch_sweep(model_factory: Callable[[], nn.Module], dataset: TensorDataset,
                batch_sizes: Sequence[int], *, steps: int = 8, optimizer: str = "adam",
                device: str = "auto") -> dict[int, TrainResult]:
    """Train a fresh model for `steps` steps at each batch size (no progress bars)."""
    return {b: train(model_factory(), dataset, steps=steps, batch_size=b, optimizer=optimizer,
                     device=device, progress=False) for b in batch_sizes}
