"""The processes of one cluster, found by pid and by what they carry, never by name.

A daemon is known by its pid file and the marker `DPSIM_SLURM_ROOT=<root>` in its initial
environment (`up` starts it with that; its slurmstepd inherit it). A job's process is known
by `SLURM_CONF=<root>/slurm.conf` together with `SLURM_JOB_ID` in its environment (sbatch
and srun hand the submitter's environment to every task). Another cluster's processes carry
another root; a shell that merely exported SLURM_CONF carries no SLURM_JOB_ID of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

from dpsim.runtime.slurm.cluster import MARKER, Cluster

PROC = Path("/proc")


def pid_from_file(path: Path) -> int | None:
    """The pid a daemon wrote to `path`, or None when there is none."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def environ(pid: int) -> list[bytes]:
    """Process `pid`'s initial environment as NAME=value entries ([] when unreadable)."""
    try:
        return (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return []


def is_running(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] != "Z"


def parent_pid(pid: int) -> int | None:
    """The parent of process `pid`, or None when it is gone."""
    try:
        return int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def environ_has_job(pid: int) -> bool:
    """True when process `pid`'s environment names a job (SLURM_JOB_ID): a job's process,
    not a daemon or a slurmstepd."""
    return any(e.startswith(b"SLURM_JOB_ID=") for e in environ(pid))


def belongs(pid: int, cluster: Cluster) -> bool:
    """True when process `pid` is a daemon, slurmstepd or job process of `cluster`."""
    entries = environ(pid)
    if f"{MARKER}={cluster.root}".encode() in entries:
        return True
    conf = f"SLURM_CONF={cluster.conf}".encode()
    return conf in entries and any(e.startswith(b"SLURM_JOB_ID=") for e in entries)


def daemon_pids(cluster: Cluster) -> dict[str, int | None]:
    """Each daemon (munged, slurmctld, slurmd-<node>) and its running pid, or None."""
    run = cluster.root / "run"
    names = ["munged", "slurmctld", *(f"slurmd-{node}" for node in cluster.nodes)]
    pids: dict[str, int | None] = {}
    for name in names:
        pid = pid_from_file(run / f"{name}.pid")
        pids[name] = pid if pid is not None and is_running(pid) and belongs(pid, cluster) \
            else None
    return pids


def _protected() -> set[int]:
    """This process and its ancestors: never ours to end, whatever their environment."""
    mine: set[int] = set()
    pid: int | None = os.getpid()
    while pid is not None and pid > 1 and pid not in mine:
        mine.add(pid)
        pid = parent_pid(pid)
    return mine


def cluster_pids(cluster: Cluster) -> list[int]:
    """Every running process of `cluster` (daemons, slurmstepd, job processes)."""
    protected = _protected()
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            if pid not in protected and is_running(pid) and belongs(pid, cluster):
                found.append(pid)
    return found


def end(pids: list[int], sig: signal.Signals, wait_s: float) -> list[int]:
    """Send `sig` to each of `pids`; return those still running after up to `wait_s` s."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    deadline = time.monotonic() + wait_s
    left = [pid for pid in pids if is_running(pid)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if is_running(pid)]
    return left


def kill_groups(pids: list[int]) -> None:
    """SIGKILL each of `pids`, and each whole process group led by one of them: a task leads
    its own group (proctrack/pgid tracks a job by its groups), so a child that dropped the
    job's environment (`env -i`) goes with it. Never this process's own group."""
    own = os.getpgrp()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid != own:
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def listening(port: int) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:`port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0
