"""`python -m dpsim lab`: JupyterLab on 127.0.0.1 with a token, opened on chapter 0."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

from dpsim.validation import require_int

START_NOTEBOOK = "notebooks/00_start_here.ipynb"
TOKEN_ENV = "DPSIM_LAB_TOKEN"


def repo_root() -> Path:
    """The checkout that holds notebooks/ (the current directory if it has one)."""
    here = Path.cwd()
    if (here / "notebooks").is_dir():
        return here
    return Path(__file__).resolve().parents[2]


def lab_command(port: int = 8888, token: str | None = None, open_browser: bool = True,
                root: Path | None = None) -> tuple[list[str], str]:
    """The argv that starts JupyterLab, and the token it uses.

    Binds 127.0.0.1 only; the token comes from DPSIM_LAB_TOKEN or is generated.
    """
    require_int("port", port, 0, 65535)
    token = token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    root = root or repo_root()
    argv = [
        sys.executable, "-m", "jupyterlab",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port or 8888}",
        "--ServerApp.port_retries=50",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.open_browser={open_browser}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")  # containers and CI run as root
    if (root / START_NOTEBOOK).exists():
        argv.append(START_NOTEBOOK)
    return argv, token


def main(port: int = 0, open_browser: bool = True) -> int:
    """Run JupyterLab in the foreground until Ctrl-C; return its exit code."""
    argv, token = lab_command(port, open_browser=open_browser)
    print(f"dpsim: starting JupyterLab on http://127.0.0.1 (token {token[:6]}...); "
          "the full URL with the token is printed below. Ctrl-C stops it.", flush=True)
    try:
        return subprocess.call(argv, cwd=repo_root())
    except KeyboardInterrupt:
        return 0
