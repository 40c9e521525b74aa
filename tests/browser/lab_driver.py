"""Start JupyterLab like `make lab` does, and stop it, whatever happened.

The browser side (opening a notebook, running it, reading the page) lives in
notebook_page.py; this file only knows about the server and the browser binary.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from dpsim.runtime.launch import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
SCREENSHOT_DIR = REPO_ROOT / "artifacts" / "screenshots"
CHROMIUM_PATH = Path(os.environ.get("DPSIM_CHROMIUM", "/usr/bin/chromium"))
# As root on a machine with no network: no sandbox, no GPU, no calls home.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers often have a tiny /dev/shm
]
VIEWPORT = {"width": 1280, "height": 860}  # CSS px; screenshots are this size (scale 1)
INSTALL_HINT = "run .ci/install-browser to enable it"

# JupyterLab user settings for the test only: never save a notebook (running it in the
# browser must not write outputs into notebooks/). Nothing else: the page must show what
# `make lab` shows (its news and update checks are off in the lab's own settings, see
# dpsim/course/lab.py; notebook_page.py fails a notebook that shows a notification).
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def notebooks() -> list[Path]:
    """The notebooks a learner opens, in reading order."""
    return sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def unavailable_reason() -> str | None:
    """Why the browser test cannot run here (None when it can)."""
    if not CHROMIUM_PATH.exists():
        return f"no Chromium at {CHROMIUM_PATH}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"the Python package playwright is not installed in {sys.prefix}"
    return None


def lab_argv(port: int) -> list[str]:
    """The command `make lab` runs, on a given port and without opening a browser.

    The token travels in DPSIM_LAB_TOKEN (and JUPYTER_TOKEN), see start_lab().
    """
    return [sys.executable, "-m", "dpsim", "lab", "--port", str(port), "--no-browser"]


@dataclass
class LabServer:
    """A running JupyterLab server started by start_lab()."""

    base_url: str  # http://127.0.0.1:PORT
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path
    run_id: str  # marks every process this server started (env DPSIM_E2E_RUN)
    tree_prefix: str = ""  # "" when notebooks/ is the server root, else "notebooks/"
    _shutdowns: list[threading.Thread] = field(default_factory=list)

    def api(self, method: str, path: str, timeout_s: float = 10.0) -> object:
        """Call the Jupyter REST API; return the decoded JSON (None for an empty body)."""
        req = urllib.request.Request(
            f"{self.base_url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def notebook_url(self, notebook: Path) -> str:
        """URL that opens one notebook in a fresh JupyterLab workspace."""
        rel = f"{self.tree_prefix}{notebook.name}"
        return f"{self.base_url}/lab/tree/{rel}?token={self.token}&reset"

    def file_url(self, path: Path) -> str | None:
        """URL that opens any notebook under the repository (None where the server's root
        is notebooks/ and `path` lies outside it)."""
        if self.tree_prefix != "notebooks/":
            return None
        rel = path.resolve().relative_to(REPO_ROOT).as_posix()
        return f"{self.base_url}/lab/tree/{rel}?token={self.token}&reset"

    def shutdown_kernels(self, wait: bool = True) -> None:
        """Shut down every kernel session (the next notebook gets the CPU to itself).

        With wait=False the shutdown runs in a thread while the next notebook opens;
        stop() waits for it.
        """
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            sessions = self.api("GET", "/api/sessions")
            ids = [s["id"] for s in sessions] if isinstance(sessions, list) else []
            thread = threading.Thread(target=self._delete_sessions, args=(ids,), daemon=True)
            thread.start()
            self._shutdowns.append(thread)
        if wait:
            self._join_shutdowns()

    def _delete_sessions(self, ids: list[str]) -> None:
        for session_id in ids:
            with contextlib.suppress(OSError, urllib.error.URLError):
                self.api("DELETE", f"/api/sessions/{session_id}", timeout_s=20.0)

    def _join_shutdowns(self) -> None:
        while self._shutdowns:
            self._shutdowns.pop().join(timeout=30.0)

    def log_tail(self, n_lines: int = 25) -> str:
        """The last lines the server wrote."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no server log)"
        return "\n".join(lines[-n_lines:])

    def stop(self) -> list[str]:
        """Stop the server and everything it started; return what went wrong on the way."""
        problems: list[str] = []
        self.shutdown_kernels()
        _kill_group(self.process)
        # the server's own children (kernels, their ranks) get the same grace to exit
        left = _poll_pids(self.run_id, grace_s=10.0)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                problems.append(f"killed process {pid}, still running 10 s after the server")
        # the server writes one log line per save; autosave is off, so there must be none
        saves = [line for line in self.log_tail(10_000).splitlines() if "Saving file at" in line]
        problems += [f"JupyterLab wrote a notebook during the test: {line}" for line in saves]
        return problems


def _kill_group(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process group (jupyter shuts its kernels down), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace_s)


def _pids_marked(run_id: str) -> list[int]:
    """Processes whose environment carries DPSIM_E2E_RUN=run_id (kernels and their ranks)."""
    marker = f"DPSIM_E2E_RUN={run_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


def _poll_pids(run_id: str, grace_s: float) -> list[int]:
    """Wait up to grace_s for the processes marked run_id to exit; return those left."""
    deadline = time.monotonic() + grace_s
    left = _pids_marked(run_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _pids_marked(run_id)
    return left


def _write_settings(settings_dir: Path) -> None:
    for rel, value in LAB_SETTINGS.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def start_lab(work_dir: Path, notebooks: list[Path], timeout_s: float = 90.0) -> LabServer:
    """Start `python -m dpsim lab` on a free port with a fresh token; wait until it answers.

    work_dir holds the server log and the test's JupyterLab settings and workspaces.
    """
    settings_dir = work_dir / "lab-settings"
    _write_settings(settings_dir)
    port = free_port()
    token = secrets.token_hex(24)
    run_id = secrets.token_hex(8)
    env = dict(os.environ)
    env.update(
        DPSIM_LAB_TOKEN=token,
        JUPYTER_TOKEN=token,
        DPSIM_E2E_RUN=run_id,
        JUPYTERLAB_SETTINGS_DIR=str(settings_dir),
        JUPYTERLAB_WORKSPACES_DIR=str(work_dir / "lab-workspaces"),
        PYTHONUNBUFFERED="1",
    )
    log_path = work_dir / "jupyterlab.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            lab_argv(port),
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() kills all of it
        )
    server = LabServer(f"http://127.0.0.1:{port}", token, process, log_path, run_id)
    try:
        _wait_ready(server, timeout_s)
        server.tree_prefix = _tree_prefix(server, notebooks)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(server: LabServer, timeout_s: float) -> None:
    """Poll the REST API until it answers; follow the port the server says it took."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {server.process.returncode} before answering; "
                f"its log ends with:\n{server.log_tail()}"
            )
        ports = re.findall(r"http://127\.0\.0\.1:(\d+)/", server.log_tail(200))
        if ports:  # with port_retries, jupyter may take another port than the one asked for
            server.base_url = f"http://127.0.0.1:{ports[-1]}"
        try:
            server.api("GET", "/api/status", timeout_s=2.0)
            return
        except urllib.error.HTTPError as exc:
            if exc.code == 403:
                raise RuntimeError(
                    f"JupyterLab on {server.base_url} refused the token: `python -m dpsim lab` "
                    "must take its token from the environment variable DPSIM_LAB_TOKEN"
                ) from exc
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise TimeoutError(
        f"JupyterLab did not answer on {server.base_url} within {timeout_s:.0f} s "
        f"(started as: {' '.join(lab_argv(0))}); its log ends with:\n{server.log_tail()}"
    )


def _tree_prefix(server: LabServer, notebooks: list[Path]) -> str:
    """'' when the server root is notebooks/ (as `make lab` does), 'notebooks/' at repo root."""
    root = server.api("GET", "/api/contents?content=1")
    names = {item["name"] for item in root.get("content", [])} if isinstance(root, dict) else set()
    if not notebooks or notebooks[0].name in names:
        return ""
    if "notebooks" in names:
        return "notebooks/"
    raise RuntimeError(
        f"JupyterLab's root holds neither {notebooks[0].name} nor notebooks/: {sorted(names)[:10]}"
    )


def clean_screenshot_dir() -> Path:
    """Empty artifacts/screenshots/ (only PNGs this test wrote) and return it."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    for old in SCREENSHOT_DIR.glob("*.png"):
        old.unlink()
    return SCREENSHOT_DIR


def copy_for_docs(shot: Path, docs_name: str) -> Path:
    """Copy a screenshot into docs/screenshots/ (for the README)."""
    target = REPO_ROOT / "docs" / "screenshots" / docs_name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, target)
    return target
