"""Kaggle (2 x T4) and Colab (T4), stood in for without a GPU: chapter 0's install cell (the
README's, word for word) in a fresh virtual environment that already has torch, then
chapters 1 and 5 under nbval with the Makefile's flags.

The "platform" is a folder of links to this environment's packages, dpsim's own install left
out, that the fresh environment sees after its own site-packages (as a platform's
preinstalled torch, numpy, jupyter...). pip runs with no package index, so the cell must
install the course without `make` from what is there and must keep that torch. Everything is
written under tmp_path: the course is copied there (its tracked files), as `git clone` would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAGGLE = "KAGGLE_KERNEL_RUN_TYPE"  # set in every Kaggle kernel
NBVAL_FLAGS = ["--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider"]  # the Makefile's
OWN = re.compile(r"^(dpsim|__editable__[._]+dpsim)", re.IGNORECASE)  # dpsim's install here


def install_cell() -> str:
    """The install lines that open chapter 0's first code cell (its setup() follows)."""
    nb = json.loads((ROOT / "notebooks" / "00_start_here.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if KAGGLE in "".join(c["source"])]
    assert len(cells) == 1, "chapter 0 has one Kaggle/Colab install cell"
    install, setup, _ = cells[0].partition("\n\nfrom dpsim.course.session import setup")
    assert setup, "the install lines come first in the cell that calls setup()"
    return install


def test_the_readme_shows_chapter_0s_install_cell() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Kaggle (2 \N{MULTIPLICATION SIGN} T4) and Colab (T4)", 1)[1]
    section = section.split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)\n```", section, re.DOTALL)
    assert block, "README: the Kaggle/Colab section shows the install cell"
    assert block.group(1) == install_cell()
    assert "make" not in install_cell()


def copy_course(dest: Path) -> None:
    """The course's tracked files (what a clone holds), as they are in this working tree."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def fresh_env_with_a_platform(tmp_path: Path) -> Path:
    """A new virtual environment that sees this one's packages, dpsim's left out, after its
    own; its python. The folder is named site-packages, as a platform's is (dill ships a
    module from elsewhere by value, not by reference)."""
    platform = tmp_path / "platform" / "site-packages"
    platform.mkdir(parents=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not OWN.match(entry.name) and entry.suffix != ".pth":
            (platform / entry.name).symlink_to(entry)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    own_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True,
                              check=True).stdout.strip()
    (Path(own_site) / "platform.pth").write_text(f"{platform}\n")
    return python


@pytest.mark.slow
def test_the_hosted_path_installs_without_make_and_runs_chapters_1_and_5(
        tmp_path: Path) -> None:
    import torch

    start = time.perf_counter()
    work = tmp_path / "work"  # Kaggle's /kaggle/working, Colab's /content
    copy_course(work / "dpsim")  # the clone the cell would make
    python = fresh_env_with_a_platform(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update({"PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
                "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1"})

    # the cell as a Kaggle kernel runs it, then what that kernel sees
    cell = install_cell() + "\nimport dpsim, torch; print(dpsim.__file__, torch.__file__)"
    ran = subprocess.run([python, "-c", cell], cwd=work, env={**env, KAGGLE: "Interactive"},
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    dpsim_file, torch_file = ran.stdout.split()[-2:]
    assert Path(dpsim_file) == work / "dpsim" / "dpsim" / "__init__.py"
    assert Path(torch_file).parent == tmp_path / "platform" / "site-packages" / "torch", (
        "pip replaced the platform's torch")
    listed = subprocess.run([python, "-m", "pip", "list", "--format=json"], env=env,
                            capture_output=True, text=True, check=True).stdout
    versions = {p["name"].lower(): p["version"] for p in json.loads(listed)}
    assert versions["torch"] == torch.__version__
    installed_s = time.perf_counter() - start

    # chapters 1 and 5 under nbval, in a kernel of the fresh environment
    run = subprocess.run([python, "-m", "pytest", "notebooks/01_single_device.ipynb",
                          "notebooks/05_ddp.ipynb", *NBVAL_FLAGS, "-q"], cwd=work / "dpsim",
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    print(f"installed in {installed_s:.1f} s; chapters 1 and 5 under nbval in "
          f"{time.perf_counter() - start - installed_s:.1f} s", file=sys.stderr)
