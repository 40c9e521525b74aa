"""Run the course's notebooks for the site, or take copies the test suite already ran.

`make site` runs each notebook of notebooks/ top to bottom in a kernel of this Python
(nbclient, the notebook's folder as working directory), two at a time, and keeps the run
in a cache folder: a notebook runs again only when it or the dpsim library changed. Where
the test suite's nbval run already executed the notebooks (tests/support/
executed_notebooks.py writes them), `copies_from` takes those, so no notebook runs twice.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import nbformat

CELL_TIMEOUT_S = 900  # one cell's limit (s); the longest cells run process groups
CACHE_KEY = "dpsim_site_run"  # the cached copy's metadata: {"key": sha256 of its inputs}


def run_key(notebook: Path, library: Path) -> str:
    """sha256 of the notebook's bytes and every .py file of the library (`library`: dpsim/)."""
    digest = hashlib.sha256(notebook.read_bytes())
    for path in sorted(library.rglob("*.py")):
        digest.update(path.relative_to(library).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cached(copy: Path, key: str) -> bool:
    """Whether `copy` is a finished run of the notebook whose run key is `key`."""
    if not copy.exists():
        return False
    nb = nbformat.read(copy, as_version=4)
    return bool(nb.metadata.get(CACHE_KEY, {}).get("key") == key)


def execute(notebook: Path, copy: Path, key: str) -> Path:
    """Run `notebook` top to bottom (its folder as working directory) into `copy`.

    A cell that raises stops the run with nbclient's CellExecutionError, which names the
    cell and carries the traceback.
    """
    from nbclient import NotebookClient

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(notebook.parent)}})
    # the kernel's own stdout/stderr (rank warnings, ZMQ notes) stay out of the build's log;
    # what the cells print and draw reaches the copy through the kernel's messages
    client.execute(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nb.metadata[CACHE_KEY] = {"key": key}
    copy.parent.mkdir(parents=True, exist_ok=True)
    partial = copy.with_suffix(".partial")
    nbformat.write(nb, partial)
    partial.replace(copy)
    return copy


def run_all(notebooks: Sequence[Path], cache: Path, library: Path, jobs: int = 2,
            say: bool = True) -> dict[str, Path]:
    """Executed copies of `notebooks` by file name: cached ones as they are, the others
    run `jobs` at a time in their own processes."""
    copies: dict[str, Path] = {}
    todo: list[tuple[Path, Path, str]] = []
    for notebook in notebooks:
        key = run_key(notebook, library)
        copy = cache / notebook.name
        copies[notebook.name] = copy
        if not cached(copy, key):
            todo.append((notebook, copy, key))
    if say:
        print(f"dpsim site: {len(notebooks) - len(todo)} notebooks unchanged since their last "
              f"run, {len(todo)} to run", file=sys.stderr)
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(execute, *args) for args in todo]
            for (notebook, _, _), future in zip(todo, futures, strict=True):
                future.result()
                if say:
                    print(f"dpsim site: ran {notebook.name}", file=sys.stderr)
    return copies


def copies_from(folder: Path, notebooks: Sequence[Path]) -> dict[str, Path]:
    """The executed copies in `folder` (the test suite's run), by notebook file name; every
    notebook must have one."""
    missing = [n.name for n in notebooks if not (folder / n.name).exists()]
    if missing:
        raise ValueError(f"executed={str(folder)!r} lacks {', '.join(missing)}; give a folder "
                         "with an executed copy of every notebook in notebooks/")
    return {n.name: folder / n.name for n in notebooks}
