"""`down` leaves nothing of the cluster: no daemon, no job process (not even one that left
the job's process group or dropped its environment) and no listener on its ports.

Judged only by what this test started: the pids of its cluster's daemons and of its job's
processes, recorded before `down`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpsim.runtime import slurm
from dpsim.runtime.slurm.processes import cluster_pids, daemon_pids, is_running, listening
from tests.runtime.slurm.conftest import needs_slurm

pytestmark = [pytest.mark.slow, needs_slurm]

JOB_SCRIPT = """\
#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --output=%j.out
env -i /bin/sleep 301 &         # no environment of the job: found by its process group
echo $! > env-less.pid
setsid /bin/sleep 302 &         # a session of its own: found by the job's environment
echo $! > own-session.pid
srun --output=%j-rank%t.log bash -c 'echo $$; exec sleep 303'
"""


def _wait_for(paths: list[Path], timeout_s: float = 60.0) -> None:
    """Wait until every file in `paths` holds a line."""
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() and p.read_text().strip() for p in paths):
        assert time.monotonic() < deadline, f"the job did not start: {paths}"
        time.sleep(0.1)


def test_down_leaves_no_daemon_job_process_or_listener(tmp_path: Path) -> None:
    start = time.monotonic()
    cluster = slurm.up(tmp_path / "cluster", nodes=2)
    up_s = time.monotonic() - start
    work = tmp_path / "job"
    work.mkdir()
    (work / "job.sh").write_text(JOB_SCRIPT)
    job_id = slurm.submit(cluster, work / "job.sh", cwd=work)
    ranks = [work / f"{job_id}-rank{rank}.log" for rank in (0, 1)]
    _wait_for([work / "env-less.pid", work / "own-session.pid", *ranks])
    daemons = daemon_pids(cluster)
    assert all(daemons.values()), daemons
    started = {int((work / name).read_text()) for name in ("env-less.pid", "own-session.pid")}
    started |= {int(path.read_text()) for path in ranks}  # each rank's sleep (exec'd)
    started |= {pid for pid in daemons.values() if pid is not None}
    started |= set(cluster_pids(cluster))  # slurmstepd, the batch script, srun
    assert all(is_running(pid) for pid in started)
    assert len(started) >= 4 + 4 + 4  # daemons, the sleeps, stepds and the script

    start = time.monotonic()
    slurm.down(cluster.root)
    down_s = time.monotonic() - start

    assert [pid for pid in started if is_running(pid)] == []
    assert [port for port in cluster.ports if listening(port)] == []
    assert slurm.status(cluster.root) is None
    assert not (cluster.root / "cluster.json").exists()
    slurm.down(cluster.root)  # a second down has nothing to do
    print(f"measured: up {up_s:.2f} s, down with a 2-node job running {down_s:.2f} s")


def test_the_command_line_starts_shows_and_stops_a_cluster(tmp_path: Path) -> None:
    root = str(tmp_path / "cli")

    def cluster(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dpsim", "cluster", *args, "--root", root],
                              capture_output=True, text=True, timeout=120, check=False)

    try:
        started = cluster("up", "--nodes", "1")
        assert started.returncode == 0, started.stderr
        assert "node n1: idle" in started.stdout
        shown = cluster("status")
        assert (shown.returncode, shown.stdout.count("NOT RUNNING")) == (0, 0), shown.stdout
    finally:
        stopped = cluster("down")
    assert stopped.returncode == 0, stopped.stderr
    assert "no daemon, job process or listener of it is left" in stopped.stdout
    assert cluster("status").returncode == 1
