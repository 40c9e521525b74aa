"""The box's limits hold whatever the notebook does: a notebook that stops the job driving
its kernel costs at most its time limit (in wall time), the box refuses user namespaces,
and its memory and processes are counted for the box as a whole."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from dpsim.course.grading import box, box_group, box_seccomp, grade
from dpsim.course.grading.box_group import BoxGroup

NO_BOX = box.unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    NO_BOX is not None and not os.environ.get("DPSIM_REQUIRE_SANDBOX"),
    reason=f"the OS sandbox is not available here: {NO_BOX}")]
SOLUTION = Path(__file__).parents[4] / "solutions" / "01_single_device.ipynb"
STOP_CELL = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"


def test_a_stopped_job_costs_at_most_its_limit(tmp_path: Path) -> None:
    """The cell stops the process that drives its kernel (SIGSTOP to its parent): the
    grader kills the box at the notebook's limit, measured in wall time, and goes on."""
    nb = nbformat.read(SOLUTION, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(STOP_CELL))
    folder = tmp_path / "mallory"
    folder.mkdir()
    path = folder / "01_single_device.ipynb"
    nbformat.write(nb, path)
    limit_s = 20.0
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        grade.main([str(path)], cell_timeout_s=10.0, notebook_timeout_s=limit_s,
                   out_dir=str(tmp_path / "out"))
    took = time.monotonic() - started
    print(f"a stopped job cost {took:.1f} s against a {limit_s:g} s limit")
    assert "stopped at its time limit" in out.getvalue(), out.getvalue()
    # the limit, plus the checking box's start and close and the reports (a few seconds)
    assert took < limit_s + 15.0, (took, out.getvalue())


def _in_box(tmp_path: Path, script: str, limits: box.BoxLimits | None = None,
            group: BoxGroup | None = None) -> subprocess.CompletedProcess[str]:
    argv = box.command(["/bin/sh", "-c", script], None, {}, limits or box.BoxLimits())
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          preexec_fn=box.rlimits(limits or box.BoxLimits(), group))


NO_GROUP = box_group.where()
needs_group = pytest.mark.skipif(
    NO_GROUP is not None,
    reason=f"no control group can be made here ({NO_GROUP}); the box keeps per-process "
    "limits, which test_a_boxs_tmpfs_counts_in_its_memory_budget covers")


def test_a_box_refuses_user_namespaces(tmp_path: Path) -> None:
    """`unshare -Ur` (uid 0 in a namespace of its own) fails in the box, as the grader's
    header says; a bubblewrap without --disable-userns is named as the reason."""
    guarded = "user namespaces disabled" in box.hardening()[0]
    if not guarded:
        pytest.skip(box.hardening()[0])
    done = _in_box(tmp_path, "id -u; unshare -Ur id -u")
    assert done.stdout.split() == ["65534"], (done.stdout, done.stderr)
    assert done.returncode != 0, done.stdout


def test_a_boxs_tmpfs_counts_in_its_memory_budget(tmp_path: Path) -> None:
    """With a 2 GiB memory limit the three tmpfs together hold at most 1 GiB (they were
    1 GiB each), and the limits in force are said in words."""
    limits = box.BoxLimits(memory_bytes=2 * 2**30)
    assert 3 * limits.tmpfs_bytes <= 2**30
    done = _in_box(tmp_path, "for d in /tmp /dev/shm /home/learner; do "
                   "dd if=/dev/zero of=$d/fill bs=1M count=1024 2>/dev/null; done; "
                   "du -sm /tmp/fill /dev/shm/fill /home/learner/fill", limits)
    held = sum(int(line.split()[0]) for line in done.stdout.splitlines())
    assert 0 < held <= 1024 + 3, (done.stdout, done.stderr)
    said = limits.describe()
    assert ("per box (a control group each)" in said if NO_GROUP is None
            else "per process, not per box" in said), said


@needs_group
def test_a_boxs_memory_is_bounded_as_a_whole(tmp_path: Path) -> None:
    """Three processes of 600 MiB each in a box of 1 GiB (each under the per-process
    limit): the box's group never holds more than 1 GiB, and the kernel ends one of them."""
    limits = box.BoxLimits(memory_bytes=2**30)
    group = box.group(limits)
    assert group is not None
    hold = "python3 -c 'import time; b = b\"x\" * (600 * 2**20); time.sleep(3)'"
    try:
        done = _in_box(tmp_path, f"{hold} & {hold} & {hold} & wait", limits, group)
        peak, killed = group.peak_bytes(), group.oom_kills()
    finally:
        group.close()
    print(f"peak {peak} bytes, {killed} process(es) ended by the kernel")
    assert peak is not None
    assert peak <= 2**30, (peak, done.stderr)
    assert killed >= 1, (peak, done.stdout, done.stderr)
    assert not group.folders[0].exists()


@needs_group
def test_a_boxs_processes_are_counted_for_it_alone(tmp_path: Path) -> None:
    """A box allowed 40 processes starts 25 while another box of the same uid holds 60:
    each box counts its own (RLIMIT_NPROC, as root, would count both); and it cannot
    start 60 of its own."""
    crowd_limits, limits = box.BoxLimits(processes=100), box.BoxLimits(processes=40)
    crowd_group, group = box.group(crowd_limits), box.group(limits)
    assert crowd_group is not None
    assert group is not None
    crowd = subprocess.Popen(box.command(["/bin/sh", "-c", "for i in $(seq 60); do sleep 30 & "
                                          "done; wait"], None, {}, crowd_limits),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=box.rlimits(crowd_limits, crowd_group))
    try:
        deadline = time.monotonic() + 30
        while len(crowd_group.members()) < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(crowd_group.members()) >= 60
        spawn = ("python3 -c 'import subprocess\nn = 0\nfor _ in range({k}):\n"
                 "    try:\n        subprocess.Popen([\"sleep\", \"5\"])\n"
                 "        n += 1\n    except OSError:\n        break\n"
                 "print(\"started\", n)'")
        some = _in_box(tmp_path, spawn.format(k=25), limits, group)
        assert "started 25" in some.stdout, (some.stdout, some.stderr)
        many = _in_box(tmp_path, spawn.format(k=60), limits, group)
        started = int(many.stdout.split()[-1]) if many.stdout.split() else 0
        assert started < 40, (many.stdout, many.stderr)
    finally:
        crowd.kill()
        crowd.wait()
        crowd_group.close()
        group.close()


@pytest.mark.skipif(not box_seccomp.supported(),
                    reason="the seccomp filter is written for x86-64 only")
def test_the_seccomp_filter_refuses_what_it_lists(tmp_path: Path) -> None:
    """process_vm_readv of the box's own process (allowed to any process outside) and
    io_uring_setup get EPERM in the box; a thread, a fork and torch still work."""
    probe = (
        "import ctypes, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "buf = ctypes.create_string_buffer(8)\n"
        "iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)\n"
        "L = ctypes.c_long\n"
        "n = libc.syscall(L(310), L(os.getpid()), iov, L(1), iov, L(1), L(0))\n"
        "print('process_vm_readv', n, ctypes.get_errno())\n"
        "params = ctypes.create_string_buffer(120)\n"
        "n = libc.syscall(L(425), L(1), params)\n"
        "print('io_uring_setup', n, ctypes.get_errno())\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "print(subprocess.run(['echo', 'fork'], capture_output=True, text=True).stdout)\n")
    outside = subprocess.run(["python3", "-c", probe], capture_output=True, text=True,
                             timeout=60)
    assert "process_vm_readv 8 " in outside.stdout, outside.stdout  # allowed outside
    done = _in_box(tmp_path, f"python3 -c \"{probe}\"")
    lines = done.stdout.splitlines()
    assert "process_vm_readv -1 1" in lines, (done.stdout, done.stderr)
    if not outside.stdout.splitlines()[1].startswith("io_uring_setup -1"):  # on outside
        assert "io_uring_setup -1 1" in lines, (done.stdout, done.stderr)
    assert "thread" in lines, (done.stdout, done.stderr)
    assert "fork" in lines, (done.stdout, done.stderr)
    assert "seccomp filter refuses" in box.hardening()[1]
