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

from dpsim.course.grading import box, grade

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


def _in_box(tmp_path: Path, script: str, limits: box.BoxLimits | None = None
            ) -> subprocess.CompletedProcess[str]:
    argv = box.command(["/bin/sh", "-c", script], None, {}, limits or box.BoxLimits())
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          preexec_fn=box.rlimits(limits or box.BoxLimits()))


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
    assert "per process, not per box" in limits.describe()
