"""`python -m dpsim lab`: its own JupyterLab settings, and for real: loopback, a token no other
user sees, nothing left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpsim.course.lab import LAB_APP_SETTINGS_DIR, STOP_GRACE_S, lab_command

psutil = pytest.importorskip("psutil", reason="psutil comes with ipykernel, which the lab needs")

ROOT = Path(__file__).resolve().parents[2]
URL_LINE = re.compile(r"running at (http://127\.0\.0\.1:(\d+)/\S*\?token=([\w-]+))")
START_WAIT_S = 120.0  # JupyterLab's start-up on a loaded machine, seconds
GONE_WAIT_S = STOP_GRACE_S + 5.0  # stop signal -> every process gone, seconds
NOTIFICATION_PLUGIN = "@jupyterlab/apputils-extension:notification"
NEWS_OFF = {"fetchNews": "false", "checkForUpdates": False}  # "none" asks the learner
SPAWN_CHILD = ("import pathlib, subprocess\n"
               "pathlib.Path({pid_file!r}).write_text(str(subprocess.Popen(['sleep', '600']).pid))")


def test_lab_command_turns_news_and_update_checks_off_in_the_lab_settings(
        tmp_path: Path) -> None:
    """The lab's own settings folder, not the learner's: no news question, no update check."""
    argv, _env = lab_command(root=tmp_path)
    assert f"--LabApp.app_settings_dir={LAB_APP_SETTINGS_DIR}" in argv
    overrides = json.loads((LAB_APP_SETTINGS_DIR / "overrides.json").read_text())
    assert overrides[NOTIFICATION_PLUGIN] == NEWS_OFF


def test_installed_jupyterlab_has_the_news_settings_the_lab_overrides(tmp_path: Path) -> None:
    """The installed JupyterLab still has the trait and the settings the lab relies on, and
    its server folds overrides.json into the defaults the page reads."""
    import jsonschema

    # JupyterLab is on every machine that runs the lab, not on the GPU check's machine
    # (scripts/gpu_bundle.txt), which collects this file; jupyterlab.labapp runs yarn on import.
    why = "JupyterLab is not installed (the GPU check's machine has none)"
    commands = pytest.importorskip("jupyterlab.commands", reason=why)
    server = pytest.importorskip("jupyterlab_server", reason=why)
    settings_utils = pytest.importorskip("jupyterlab_server.settings_utils", reason=why)

    assert "app_settings_dir" in server.LabServerApp.class_trait_names(config=True)  # LabApp's base
    schemas_dir = Path(commands.get_app_dir()) / "schemas"
    schema_file = schemas_dir / "@jupyterlab" / "apputils-extension" / "notification.json"
    schema = json.loads(schema_file.read_text())
    assert set(NEWS_OFF) <= set(schema["properties"]), sorted(schema["properties"])
    jsonschema.validate(NEWS_OFF, schema)  # its values are allowed ("additionalProperties": false)

    served, _warnings = settings_utils.get_settings(
        str(LAB_APP_SETTINGS_DIR), str(schemas_dir), str(tmp_path), schema_name=NOTIFICATION_PLUGIN)
    defaults = {key: served["schema"]["properties"][key]["default"] for key in NEWS_OFF}
    assert defaults == NEWS_OFF


class Lab:
    """A `python -m dpsim lab` process started by a test, with its output read in a thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.runtime_dir = tmp_path / "runtime"
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(self.runtime_dir))
        env.pop("DPSIM_LAB_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dpsim", "lab", "--no-browser", "--port", "0"],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
            preexec_fn=_default_stop_signals)  # a runner under nohup ignores SIGHUP
        self.lines: list[str] = []
        self.started: set[int] = set()  # every process of it seen, for the cleanup
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait(self, timeout_s: float) -> int:
        """The exit code once the process ended and all its output was read."""
        code = self.proc.wait(timeout_s)
        self.reader.join(timeout_s)
        return code

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_url(self) -> tuple[str, int, str]:
        """(url, port, token) of the printed URL."""
        deadline = time.monotonic() + START_WAIT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            match = URL_LINE.search(self.output())
            if match:
                return match.group(1), int(match.group(2)), match.group(3)
            time.sleep(0.2)
        pytest.fail(f"no URL printed (exit code {self.proc.poll()}):\n{self.output()}")

    def family(self) -> list[int]:
        """Pids of the lab process and everything below it."""
        try:
            me = psutil.Process(self.proc.pid)
            pids = [self.proc.pid, *(p.pid for p in me.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []
        self.started.update(pids)
        return pids

    def kill_leftovers(self) -> None:
        """SIGKILL whatever this test started that still runs (after a failure)."""
        for pid in sorted(self.started | {self.proc.pid}):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)


def _default_stop_signals() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _command_lines_holding(text: str) -> list[str]:
    """Command lines of the processes of this machine that contain `text` (a command line is
    bytes: another user's process may hold any, e.g. Latin-1, so it is searched as bytes)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmdline:
            found.append(f"{entry.name}: {cmdline.decode(errors='backslashreplace')}")
    return found


def _start_kernel(port: int, token: str | None) -> dict[str, str]:
    """POST /api/kernels, with the token in the Authorization header when given."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels", data=b"{}",
                                     method="POST")
    if token is not None:
        request.add_header("Authorization", f"token {token}")
    with urllib.request.urlopen(request, timeout=60) as response:
        reply: dict[str, str] = json.loads(response.read())
    return reply


def _run_in_kernel(runtime_dir: Path, kernel_id: str, code: str) -> None:
    """Execute `code` in the kernel through its connection file; wait for its reply.

    No heartbeat check (`wait_for_ready`): on a loaded machine a late first beat reads as
    a dead kernel. Shell requests queue until the kernel listens.
    """
    from jupyter_client import BlockingKernelClient

    client = BlockingKernelClient(connection_file=str(runtime_dir / f"kernel-{kernel_id}.json"))
    client.load_connection_file()
    client.start_channels()
    try:  # the reply comes on the shell channel, which queues; iopub may drop early messages
        msg_id = client.execute(code)
        while True:
            reply = client.get_shell_msg(timeout=120)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", reply["content"]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    started = Lab(tmp_path)
    try:
        yield started
    finally:
        started.kill_leftovers()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads command lines from /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_lab_stops_server_and_kernels_on_signal(lab: Lab, signum: int) -> None:
    url, port, token = lab.wait_for_url()
    assert "/lab/tree/notebooks/00_start_here.ipynb?token=" in url
    assert len(token) >= 24
    assert not _command_lines_holding(token), "the token is visible to `ps`"

    with pytest.raises(urllib.error.HTTPError) as refused:
        _start_kernel(port, token=None)
    assert refused.value.code == 403  # the server really uses the token we printed
    kernel_id = _start_kernel(port, token)["id"]
    # What a learner's code starts in the kernel must go too (a kernel that shuts down
    # cleanly leaves its children running).
    pid_file = lab.runtime_dir / "child.pid"
    _run_in_kernel(lab.runtime_dir, kernel_id, SPAWN_CHILD.format(pid_file=str(pid_file)))
    child = int(pid_file.read_text())
    family = lab.family()
    assert child in family
    assert len(family) >= 4, f"expected lab, server, kernel and its child, got {family}"

    lab.proc.send_signal(signum)
    assert lab.wait(GONE_WAIT_S) == 0, lab.output()
    deadline = time.monotonic() + 2.0  # the supervisor waits for them; this is slack
    while any(_alive(pid) for pid in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in family if _alive(pid)]
    assert not left, f"processes left behind: {left}\n{lab.output()}"
    assert "stopped" in lab.output()


STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[1] == "server":  # a kernel-like child in a session of its own, and its child
    subprocess.Popen([sys.executable, "-c", sys.argv[2], "kernel", sys.argv[2]],
                     start_new_session=True)
elif sys.argv[1] == "kernel":
    subprocess.Popen(["sleep", "600"])
time.sleep(600)
"""


@pytest.mark.slow
def test_stop_server_kills_what_ignores_sigterm() -> None:
    """A server that does not stop on SIGTERM, and kernels in their own sessions, still go."""
    from dpsim.course.lab import stop_server

    server = subprocess.Popen([sys.executable, "-c", STUBBORN, "server", STUBBORN],
                              start_new_session=True)
    family = [server.pid]
    try:
        deadline = time.monotonic() + 30
        while len(family) < 3:
            assert time.monotonic() < deadline, "the stub's children never started"
            time.sleep(0.1)
            family = [server.pid, *(p.pid for p in psutil.Process(server.pid).children(True))]
        start = time.monotonic()
        stop_server(server, grace_s=0.5)
        assert time.monotonic() - start < 5.0
        left = [pid for pid in family if _alive(pid)]
        assert not left, f"processes left behind: {left}"
    finally:
        for pid in family:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        server.wait()
