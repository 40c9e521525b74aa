"""A fresh Python environment without network: `fresh_env(folder)`.

A new virtual environment sees this one's installed packages (torch, numpy, jupyter, ...)
through a `.pth` line pointing at a folder of links to them, all but dpsim itself (and its
editable-install hook), so whatever dpsim is installed into the new environment is the one
it imports. The folder's name ends in `site-packages`: dill ships modules found there by
reference, as it does in any real environment. The environment has pip but not its own old
setuptools, so a build without isolation uses this one's (setuptools>=68).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

OWN = ("dpsim", "__editable__", "_dpsim")  # this environment's dpsim, never linked


def fresh_env(folder: Path) -> Path:
    """Make the environment in `folder`; its python."""
    site = Path(sysconfig.get_paths()["purelib"])
    deps = folder / "deps" / "site-packages"
    deps.mkdir(parents=True)
    for entry in site.iterdir():
        if not entry.name.startswith(OWN):
            (deps / entry.name).symlink_to(entry)
    env = folder / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = env / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"],
                   check=True)
    own_site = subprocess.run([str(python), "-c", "import sysconfig; "
                               "print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    (Path(own_site) / "offline_deps.pth").write_text(f"{deps}\n")
    return python


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pip install into the environment of `python`, offline (no index, no build isolation)."""
    return subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index",
                           "--no-build-isolation", *args], capture_output=True, text=True,
                          timeout=600)
