"""The OS box one notebook is graded in (`dpsim.course.grading.box`): what a process in it
can see, reach and use. Each test runs a short Python program in a real box."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpsim.course.grading import box

NO_BOX = box.unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    NO_BOX is not None and not os.environ.get("DPSIM_REQUIRE_SANDBOX"),
    reason=f"the OS sandbox is not available here: {NO_BOX}")]

PROBE = r'''
import errno, json, os, socket, resource
found = {"uid": os.getuid(), "euid": os.geteuid(), "pid": os.getpid(),
         "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
         "home": os.getcwd(), "env": sorted(os.environ)}
found["cap_eff"] = open("/proc/self/status").read().split("CapEff:")[1].split()[0]
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    found["network"] = "reached"
except OSError as exc:
    found["network"] = exc.__class__.__name__
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
socket.create_connection(srv.getsockname(), timeout=2)
found["loopback"] = True
found["visible"] = {p: sorted(os.listdir(p)) if os.path.isdir(p) else os.path.exists(p)
                    for p in SECRET_PATHS}
for path in INSTALLED:
    try:
        open(path, "a").close()
        found.setdefault("written", []).append(path)
    except OSError:
        pass
try:
    with open("/home/learner/big", "wb") as f:
        f.write(b"x" * (3 * 2**20))
    found["disk"] = "wrote 3 MiB"
except OSError as exc:
    found["disk"] = errno.errorcode[exc.errno]
try:
    bytearray(4 * 2**30)
    found["memory"] = "allocated 4 GiB"
except MemoryError:
    found["memory"] = "MemoryError"
children = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            import time; time.sleep(5); os._exit(0)
        children += 1
except OSError:
    pass
found["children"] = children
print(json.dumps(found))
'''


def _probe(tmp_path: Path, **limits: int) -> dict[str, object]:
    secret = tmp_path / "other_student.ipynb"
    secret.write_text("{}")
    installed = [str(Path(box.__file__))]
    code = (f"SECRET_PATHS = {[str(secret), str(Path.cwd())]!r}\n"
            f"INSTALLED = {installed!r}\n{PROBE}")
    bl = box.BoxLimits(**{"memory_bytes": 2 * 2**30, "processes": 40, "disk_bytes": 2**20,
                          **limits})
    argv = box.command([sys.executable, "-I", "-c", code], None, {"ONLY": "this"}, bl)
    done = subprocess.run(argv, capture_output=True, timeout=120, preexec_fn=box.rlimits(bl),
                          env={"PATH": os.defpath, "DPSIM_GRADING_SECRET": "s3cret"})
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return result


def test_a_box_sees_and_reaches_only_itself(tmp_path: Path) -> None:
    got = _probe(tmp_path)
    assert got["uid"] == got["euid"] == box.BOX_UID
    assert got["cap_eff"] == "0000000000000000"
    processes = [int(p) for p in got["processes"]]  # type: ignore[attr-defined]
    assert min(processes) <= 2
    assert len(processes) <= 4
    assert got["network"] != "reached"
    assert got["loopback"] is True
    assert got["home"] == box.BOX_HOME
    visible = got["visible"]
    assert isinstance(visible, dict)
    secret, here = visible.values()
    assert secret is False
    # the repository's folder is there only where the virtual environment lies inside it
    assert set(here) <= {".venv"}
    assert "written" not in got
    assert "DPSIM_GRADING_SECRET" not in got["env"]  # type: ignore[operator]
    assert "ONLY" in got["env"]  # type: ignore[operator]


def test_a_box_has_limits(tmp_path: Path) -> None:
    got = _probe(tmp_path)
    assert got["disk"] in ("ENOSPC", "EFBIG")  # the tmpfs size or RLIMIT_FSIZE
    assert got["memory"] == "MemoryError"
    assert int(got["children"]) < 40  # type: ignore[call-overload]


def test_a_box_dies_whole(tmp_path: Path) -> None:
    """Killing the box's first process ends every process in it, detached or not."""
    code = ("import os, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.execve('/bin/sh', ['sh', '-c', 'sleep 300', 'dpsim-box-test-41d9'], {})\n"
            "    os._exit(0)\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n")
    bl = box.BoxLimits()
    proc = subprocess.Popen(box.command([sys.executable, "-I", "-c", code], None, {}, bl),
                            stdout=subprocess.PIPE, start_new_session=True,
                            preexec_fn=box.rlimits(bl))
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"

    def survivors() -> list[str]:
        found = []
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and b"dpsim-box-test-41d9" in Path(
                        f"/proc/{entry}/cmdline").read_bytes():
                    found.append(entry)
            except OSError:
                pass
        return found

    assert survivors()
    os.killpg(proc.pid, 9)
    proc.wait()
    import time

    deadline = time.monotonic() + 5
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert survivors() == []


def test_python_prefixes_cover_this_interpreter() -> None:
    prefixes = box.python_prefixes()
    assert any(sys.prefix.startswith(p) for p in prefixes)
    assert any(os.path.realpath(sys.executable).startswith(p) for p in prefixes)
