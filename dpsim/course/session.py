"""Notebook start-up: figures without embedded plotly.js, seeds, and what is real here."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Session:
    """What this notebook will run for real on this machine."""

    device: str  # "cuda" or "cpu"
    n_gpus: int
    seed: int

    def __str__(self) -> str:
        where = f"{self.n_gpus} CUDA GPU(s)" if self.n_gpus else "CPU only (no CUDA GPU)"
        return f"dpsim session: {where}; real runs use device '{self.device}'; seed {self.seed}"


def setup(seed: int = 0, renderer: str = "plotly_mimetype") -> Session:
    """Seed python/numpy/torch and send plotly figures as JSON (JupyterLab draws them).

    The "plotly_mimetype" renderer keeps plotly.js out of saved notebooks.
    """
    import plotly.io as pio
    import torch

    pio.renderers.default = renderer
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return Session("cuda" if n_gpus else "cpu", n_gpus, seed)
