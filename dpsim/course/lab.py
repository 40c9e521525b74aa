"""`python -m dpsim lab`: JupyterLab on 127.0.0.1 with a token, supervised until a signal.

JupyterLab runs as a child in its own session (so its own process group). SIGTERM, SIGHUP
or SIGINT (Ctrl-C) to the lab command stop it: SIGTERM to the server, which shuts its
kernels down; after `STOP_GRACE_S` every process left of it (server, kernels, what they
started) is killed. The token travels in the environment (`JUPYTER_TOKEN`), never on a
command line, where `ps` would show it to every user of the machine.

The lab's own settings (not the user's, in ~/.jupyter/lab/user-settings) come from
lab_settings/overrides.json next to this file: no "Would you like to get notified about
official Jupyter news?" pop-up over the dashboards, no check for a newer JupyterLab.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dpsim.sim import require_int

START_NOTEBOOK = "notebooks/00_start_here.ipynb"
TOKEN_ENV = "DPSIM_LAB_TOKEN"  # a token of your choosing; else one is generated
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT")
                     if hasattr(signal, name))
STOP_GRACE_S = 5.0  # SIGTERM to the server -> SIGKILL to what is left, seconds
START_TIMEOUT_S = 120.0  # how long the server may take to start listening, seconds
_POLL_S = 0.2  # the supervisor's period, seconds
_PR_SET_PDEATHSIG = 1
# JupyterLab's application settings folder (LabApp.app_settings_dir) for dpsim's lab. Read
# from jupyterlab 4.6.6 and jupyterlab_server 2.28.1: the server folds the folder's
# overrides.json into the settings schemas' defaults (a learner's user settings still win);
# the announcements plugin of @jupyterlab/apputils-extension asks "Would you like to get
# notified about official Jupyter news?" exactly when the notification plugin's `fetchNews`
# is "none" (its schema default), and asks the server about a newer JupyterLab unless
# `checkForUpdates` is false. (LabApp.news_url=None stops only the server's fetch, not the
# question.) The folder replaces {app_dir}/settings, where an administrator may put
# overrides.json or page_config.json; dpsim's .venv has none.
LAB_APP_SETTINGS_DIR = Path(__file__).with_name("lab_settings")


def repo_root() -> Path:
    """The checkout that holds notebooks/ (the current directory if it has one)."""
    here = Path.cwd()
    if (here / "notebooks").is_dir():
        return here
    return Path(__file__).resolve().parents[2]


def lab_command(port: int = 0, token: str | None = None, open_browser: bool = True,
                root: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv that starts JupyterLab and the environment that carries its token.

    Binds 127.0.0.1 only. `port`: 0 lets the OS pick a free one. The token (in the
    environment as JUPYTER_TOKEN) comes from `token`, DPSIM_LAB_TOKEN, or is generated.
    JupyterLab's own settings come from LAB_APP_SETTINGS_DIR (news and update checks off).
    """
    require_int("port", port, 0, 65535)
    token = token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    root = root or repo_root()
    argv = [
        sys.executable, "-m", "jupyterlab",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=50",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.open_browser={open_browser}",
        f"--LabApp.app_settings_dir={LAB_APP_SETTINGS_DIR}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")  # containers and CI run as root
    if (root / START_NOTEBOOK).exists():
        argv.append(START_NOTEBOOK)
    return argv, {**os.environ, "JUPYTER_TOKEN": token}


# --------------------------------------------------------------------------- signals


@contextlib.contextmanager
def _stop_requests() -> Iterator[threading.Event]:
    """An event set by SIGTERM, SIGHUP or SIGINT while the block runs; old handlers after.

    A signal this process was started ignoring stays ignored (`nohup` keeps SIGHUP away).
    """
    requested = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        requested.set()

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield requested
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that sends the child SIGTERM when this process dies (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    parent = os.getpid()

    def arm() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before the signal was armed
            os._exit(1)

    return arm


# --------------------------------------------------------------------------- the server


def start_server(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """Start JupyterLab in a session of its own, stdin closed, dying with this process."""
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=_die_with_parent())


def server_info(pid: int) -> dict[str, Any] | None:
    """What the server of process `pid` wrote about itself (url, port, token), once up."""
    from jupyter_core.paths import jupyter_runtime_dir

    path = Path(jupyter_runtime_dir()) / f"jpserver-{pid}.json"
    try:
        info: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not written yet, or half written
    return info if info.get("port") else None


def lab_url(info: dict[str, Any], root: Path) -> str:
    """The URL that opens JupyterLab (on the start notebook if there is one), token included."""
    base = str(info["url"]).rstrip("/")
    page = f"/lab/tree/{START_NOTEBOOK}" if (root / START_NOTEBOOK).exists() else "/lab"
    token = info.get("token") or ""
    return f"{base}{page}?token={token}" if token else base + page


def _wait_until_up(server: subprocess.Popen[bytes], stop: threading.Event,
                   timeout_s: float = START_TIMEOUT_S) -> dict[str, Any] | None:
    """The server's info once it listens; None if it exited, a stop came, or time ran out."""
    deadline = time.monotonic() + timeout_s
    while server.poll() is None and not stop.is_set() and time.monotonic() < deadline:
        info = server_info(server.pid)
        if info is not None:
            return info
        stop.wait(_POLL_S)
    return None


# --------------------------------------------------------------------------- stopping


def _family(pid: int) -> list[Any]:
    """psutil handles of `pid` and every process below it (kernels and what they started)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _kill_all(procs: list[Any], server_pid: int) -> None:
    """SIGKILL the server's process group and each process in `procs` (and its own group)."""
    import psutil

    groups = hasattr(os, "killpg")  # POSIX
    if groups:
        with contextlib.suppress(OSError):
            os.killpg(server_pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.Error, OSError):
            if not proc.is_running():
                continue  # gone, or its pid now belongs to someone else
            if groups and os.getpgid(proc.pid) == proc.pid:  # a kernel leads its own group
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()


def stop_server(server: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """Stop JupyterLab: SIGTERM (it shuts its kernels down), then SIGKILL all that is left.

    Returns once the server and every process it started (known when this was called or
    after `grace_s` seconds) are gone or were killed.
    """
    import psutil

    family = _family(server.pid)
    if server.poll() is None:
        with contextlib.suppress(OSError):
            server.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(grace_s)
    seen = {p.pid for p in family}
    family += [p for p in _family(server.pid) if p.pid not in seen]
    _kill_all(family, server.pid)
    server.wait()
    psutil.wait_procs([p for p in family if p.pid != server.pid], timeout=5.0)


def _say(text: str) -> None:
    """Print a line to stdout; a closed terminal (after SIGHUP) is not an error."""
    with contextlib.suppress(OSError, ValueError):
        print(text, flush=True)


def main(port: int = 0, open_browser: bool = True) -> int:
    """Run JupyterLab until it exits or a stop signal comes; return the exit code.

    A stop by SIGTERM, SIGHUP or Ctrl-C returns 0 once JupyterLab and its kernels are gone.
    """
    root = repo_root()
    argv, env = lab_command(port, open_browser=open_browser, root=root)
    with _stop_requests() as stop:
        server = start_server(argv, env, root)
        try:
            info = _wait_until_up(server, stop)
            if info is not None:
                _say(f"dpsim: JupyterLab is running at {lab_url(info, root)}\n"
                     "dpsim: open that URL in a browser; Ctrl-C stops JupyterLab and its kernels.")
            elif server.poll() is None and not stop.is_set():
                _say(f"dpsim: JupyterLab did not report its URL within {START_TIMEOUT_S:g} s "
                     "(its log is above); Ctrl-C stops it.")
            while server.poll() is None and not stop.is_set():
                stop.wait(_POLL_S)
        finally:
            stopped = stop.is_set()
            stop_server(server)
    if stopped:
        _say("dpsim: JupyterLab and its kernels are stopped.")
        return 0
    return server.returncode
