"""Run the course's notebooks for the site, or take copies the test suite already ran.

`make site` runs each notebook of notebooks/ top to bottom in a kernel of this Python
(nbclient, the notebook's folder as working directory), two at a time, each from a
process of its own, and keeps the run
in a cache folder: a notebook runs again only when it or the dpsim library changed. Where
the test suite's nbval run already executed the notebooks (tests/support/
executed_notebooks.py writes them), `copies_from` takes those, so no notebook runs twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import nbformat

CELL_TIMEOUT_S = 900  # one cell's limit (s); the longest cells run process groups
SITE_CODE = ("course", "website")  # the site's own code, under dpsim/: no notebook runs it
CACHE_KEY = "dpsim_site_run"  # the cached copy's metadata: {"key": sha256 of its inputs}


def run_key(notebook: Path, library: Path) -> str:
    """sha256 of the notebook's bytes and every .py file of the library (`library`: dpsim/)
    but the site's own code (course/website/), which no notebook runs."""
    digest = hashlib.sha256(notebook.read_bytes())
    for path in sorted(library.rglob("*.py")):
        if path.relative_to(library).parts[:2] == SITE_CODE:
            continue
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
                            store_widget_state=False,
                            resources={"metadata": {"path": str(notebook.parent)}})
    # No front end for widgets: nbclient's stand-in for the Output widget answers the kernel
    # from inside its message loop, and a run could then wait forever for a cell that had
    # ended. A dashboard reaches the page through the still picture it carries instead.
    client.comm_open_handlers = {}
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
    run `jobs` at a time, each in a Python process of its own (`python -m
    dpsim.course.website.execute NOTEBOOK COPY KEY`). A failed run raises with its log."""
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
    running: list[tuple[Path, Path, subprocess.Popen[bytes]]] = []
    try:
        while todo or running:
            while todo and len(running) < max(1, jobs):
                notebook, copy, key = todo.pop(0)
                log = copy.with_suffix(".log")
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("wb") as sink:
                    process = subprocess.Popen(
                        [sys.executable, "-m", "dpsim.course.website.execute",
                         str(notebook), str(copy), key],
                        stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                        start_new_session=True)  # its kernel and ranks: one group to kill
                running.append((notebook, log, process))
            time.sleep(0.2)
            for entry in [r for r in running if r[2].poll() is not None]:
                running.remove(entry)
                notebook, log, process = entry
                if process.returncode != 0:
                    raise RuntimeError(f"{notebook.name} failed to run (exit "
                                       f"{process.returncode}):\n{log.read_text()[-6000:]}")
                if say:
                    print(f"dpsim site: ran {notebook.name}", file=sys.stderr)
    finally:
        for _, _, process in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return copies


def copies_from(folder: Path, notebooks: Sequence[Path]) -> dict[str, Path]:
    """The executed copies in `folder` (the test suite's run), by notebook file name; every
    notebook must have one."""
    missing = [n.name for n in notebooks if not (folder / n.name).exists()]
    if missing:
        raise ValueError(f"executed={str(folder)!r} lacks {', '.join(missing)}; give a folder "
                         "with an executed copy of every notebook in notebooks/")
    return {n.name: folder / n.name for n in notebooks}


if __name__ == "__main__":  # one notebook's run, started by run_all
    execute(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
