"""Notebook start-up: figures without embedded plotly.js, seeds, and what is real here."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIME = "plotly_mimetype"  # the figure as JSON: JupyterLab's plotly extension draws it
# The JSON and, beside it, HTML that loads plotly.js from plotly's CDN (never embedded):
# a front end without the plotly renderer (VS Code without it, a JupyterLab whose
# extension is missing) shows the HTML; one with it shows the JSON.
MIME_WITH_HTML = "plotly_mimetype+notebook_connected"
COLAB = "colab"  # HTML that loads plotly.js from the CDN: Colab draws no plotly JSON
LAB_EXTENSION = "jupyterlab-plotly"


@dataclass(frozen=True)
class Session:
    """What this notebook will run for real on this machine."""

    device: str  # "cuda" or "cpu"
    n_gpus: int
    seed: int
    renderer: str = MIME  # the plotly renderer figures use

    def __str__(self) -> str:
        where = f"{self.n_gpus} CUDA GPU(s)" if self.n_gpus else "CPU only (no CUDA GPU)"
        return f"dpsim session: {where}; real runs use device '{self.device}'; seed {self.seed}"


def lab_extension_installed(paths: Collection[str] | None = None) -> bool:
    """Whether JupyterLab's plotly renderer (`jupyterlab-plotly`) is installed beside us.

    `paths`: the labextension folders to look in (default: jupyter_core's search path).
    """
    if paths is None:
        from jupyter_core.paths import jupyter_path

        paths = jupyter_path("labextensions")
    return any((Path(p) / LAB_EXTENSION / "package.json").is_file() for p in paths)


def choose_renderer(env: Mapping[str, str] | None = None,
                    modules: Collection[str] | None = None,
                    lab_extension: bool | None = None) -> str:
    """The plotly renderer for the front end this kernel serves; none embeds plotly.js.

    PLOTLY_RENDERER in the environment wins. Colab (google.colab imported, or its
    environment variables): "colab". VS Code (VSCODE_PID): the JSON with the HTML fallback.
    JupyterLab or Notebook 7 with the jupyterlab-plotly extension: the JSON alone (today's
    notebooks); without it: the JSON with the HTML fallback. `env`, `modules` and
    `lab_extension` default to this process's environment, sys.modules and a look on disk.
    """
    env = os.environ if env is None else env
    modules = sys.modules.keys() if modules is None else modules
    if env.get("PLOTLY_RENDERER"):
        return env["PLOTLY_RENDERER"]
    if "google.colab" in modules or "COLAB_RELEASE_TAG" in env or "COLAB_NOTEBOOK_ID" in env:
        return COLAB
    if "VSCODE_PID" in env:
        return MIME_WITH_HTML
    if lab_extension is None:
        lab_extension = lab_extension_installed()
    return MIME if lab_extension else MIME_WITH_HTML


def setup(seed: int = 0, renderer: str | None = None) -> Session:
    """Seed python/numpy/torch and pick the plotly renderer (`choose_renderer` when None).

    Every renderer chosen here keeps plotly.js out of saved notebooks: figures travel as
    JSON, or as HTML that loads plotly.js from the CDN when the front end cannot draw JSON.
    """
    import plotly.io as pio
    import torch

    chosen = choose_renderer() if renderer is None else renderer
    pio.renderers.default = chosen
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return Session("cuda" if n_gpus else "cpu", n_gpus, seed, chosen)
