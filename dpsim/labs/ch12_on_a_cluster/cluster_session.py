"""The chapter's cluster: the one already running, or one it starts (and later stops); where
Slurm is not installed, every Slurm command the chapter makes is printed instead of run.

Slurm's commands reach the cluster through SLURM_CONF, which `open_cluster` puts in this
process's environment (jobs inherit it, as they inherit PATH: `sbatch` exports the
submitter's environment), so `!squeue` in a cell works as on a real cluster's login node.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpsim.runtime.slurm import Cluster, JobState, available, down, status, submit, up, wait


@dataclass(frozen=True)
class ClusterSession:
    """The cluster the chapter uses: `cluster` None where Slurm is missing (`missing` says
    what to install); `started`: the chapter started it, so `close_cluster` stops it."""

    cluster: Cluster | None
    started: bool
    missing: str | None = None

    def __str__(self) -> str:
        if self.cluster is None:
            return f"no Slurm here ({self.missing}): the cells print what they would run"
        nodes = ", ".join(f"{n} at {self.cluster.node_addr(n)}" for n in self.cluster.nodes)
        how = "started now" if self.started else "already running"
        return f"Slurm cluster ({how}): nodes {nodes}"


def open_cluster(nodes: int = 2) -> ClusterSession:
    """The running cluster (default folder), or a new one of `nodes` nodes; SLURM_CONF and
    this Python's folder (torchrun, python) go into the environment jobs inherit."""
    missing = available()
    if missing is not None:
        return ClusterSession(None, False, missing)
    running = status()
    started = running is None or not running.healthy
    cluster = up(nodes=nodes) if started else running.cluster  # type: ignore[union-attr]
    os.environ.update(cluster.env())
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return ClusterSession(cluster, started)


def close_cluster(session: ClusterSession) -> str:
    """Stop the cluster if the chapter started it; say what was done."""
    if session.cluster is None:
        return "no cluster was used"
    if not session.started:
        return "the cluster was running before the chapter: left running"
    down(session.cluster.root)
    return "the cluster the chapter started is stopped"


def sbatch(session: ClusterSession, script: Path, *, cwd: Path,
           options: Sequence[str] = ()) -> int | None:
    """Submit `script` with `options` from `cwd`; its job id (None where Slurm is missing:
    the command is printed)."""
    if session.cluster is None:
        print("would run:", shlex.join(["sbatch", *options, str(script)]))
        return None
    return submit(session.cluster, script, cwd=cwd, extra_args=options)


def wait_job(session: ClusterSession, job_id: int | None, timeout_s: float = 180.0
             ) -> JobState | None:
    """The job's final state (None where Slurm is missing)."""
    if session.cluster is None or job_id is None:
        return None
    return wait(session.cluster, job_id, timeout_s)


def scontrol(session: ClusterSession, *args: str, check: bool = True) -> str:
    """Run `scontrol args` against the cluster and return its output (printed, not run,
    where Slurm is missing); with `check`, a failure raises RuntimeError with its message."""
    if session.cluster is None:
        print("would run:", shlex.join(["scontrol", *args]))
        return ""
    done = subprocess.run(["scontrol", *args], capture_output=True, text=True, check=False,
                          env={**os.environ, **session.cluster.env()}, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"scontrol {shlex.join(args)}: {done.stderr.strip()}")
    return done.stdout


def wait_for_file(path: Path, timeout_s: float = 120.0) -> bool:
    """Poll every 0.1 s until `path` exists; False after `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_requeued(session: ClusterSession, job_id: int | None, timeout_s: float = 60.0
                  ) -> str:
    """Poll until the job is back in the queue after a node failure (Restarts >= 1,
    PENDING); its state and reason as scontrol says them. TimeoutError after `timeout_s`."""
    if session.cluster is None or job_id is None:
        return ""
    deadline = time.monotonic() + timeout_s
    while True:
        state, restarts = (job_field(session, job_id, k) for k in ("JobState", "Restarts"))
        if state == "PENDING" and restarts not in ("", "0"):
            reason = job_field(session, job_id, "Reason")
            return f"job {job_id}: JobState={state} Reason={reason} Restarts={restarts}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} was not requeued within {timeout_s:.0f} s "
                               f"(JobState={state}, Restarts={restarts})")
        time.sleep(0.2)


def job_field(session: ClusterSession, job_id: int | None, name: str) -> str:
    """One field of `scontrol show job` (e.g. "JobState", "Restarts"); "" if unknown."""
    if session.cluster is None or job_id is None:
        return ""
    for word in scontrol(session, "show", "job", "-o", str(job_id)).split():
        key, _, value = word.partition("=")
        if key == name:
            return value
    return ""


# the chapter-5 DDP script (tests/house/test_train_ddp_script.py keeps it equal to that cell)
TRAIN_DDP = Path(__file__).resolve().parents[3] / "scripts" / "train_ddp.py"
