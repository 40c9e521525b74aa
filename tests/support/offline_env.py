"""A fresh Python environment without network: `fresh_env(folder)`.

A new virtual environment sees this one's installed packages (torch, numpy, jupyter, ...)
through a `.pth` line pointing at a folder of links to them, all but dpsim itself (and its
editable-install hook), so whatever dpsim is installed into the new environment is the one
it imports. The folder's name ends in `site-packages`: dill ships modules found there by
reference, as it does in any real environment. The environment has pip but not its own old
setuptools, so a build without isolation uses this one's (setuptools>=68). With `inside`,
the packages are hard links in the environment's own site-packages instead (the grader's
OS box binds only the environment's folder).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

OWN = ("dpsim", "__editable__", "_dpsim")  # this environment's dpsim, never linked


def fresh_env(folder: Path, inside: bool = False) -> Path:
    """Make the environment in `folder`; its python. `inside`: the packages are hard links
    in its own site-packages (a box that sees only the environment's folder sees them too)."""
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
    if not inside:
        (Path(own_site) / "offline_deps.pth").write_text(f"{deps}\n")
        return python
    for entry in site.iterdir():  # hard links: same file system, no copy of 1.6 GB
        target = Path(own_site) / entry.name
        if entry.name.startswith((*OWN, "pip")) or target.exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True, copy_function=os.link)
        else:
            os.link(entry, target, follow_symlinks=False)
    return python


def pip_install(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pip install into the environment of `python`, offline (no index, no build isolation)."""
    return subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index",
                           "--no-build-isolation", *args], capture_output=True, text=True,
                          timeout=600)
