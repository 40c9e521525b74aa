"""`up` and `down`: start a Slurm cluster on this machine in a folder of its own, and stop
everything it started; `kill_node`: a node's power cut.

`up` starts munged (its own key and socket), slurmctld and one slurmd per node, each as a
daemon carrying `DPSIM_SLURM_ROOT=<root>`, all on 127.0.0.1 at free ports, and waits until
sinfo shows every node idle. Each fresh start wipes the state folder, so job ids start at 1
again; on a cluster already up, `up` only starts the slurmd of a node `kill_node` stopped.
`down` cancels the jobs, stops the daemons by their pid files, then ends every process left
that belongs to the cluster (`processes.belongs`) with its process group, and checks that
no port of the cluster still listens.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from dpsim.runtime.launch.ports import free_port
from dpsim.runtime.slurm.cluster import MARKER, Cluster, default_root
from dpsim.runtime.slurm.commands import slurm
from dpsim.runtime.slurm.config import slurm_conf
from dpsim.runtime.slurm.packages import available, program_path
from dpsim.runtime.slurm.processes import (
    cluster_pids,
    daemon_pids,
    end,
    environ,
    environ_has_job,
    is_running,
    kill_groups,
    listening,
    parent_pid,
)
from dpsim.runtime.slurm.status import node_states, status

MAX_NODES = 16
MAX_SOCKET_PATH = 107  # bytes in a Unix socket's path (sun_path holds 108 with the NUL)
UP_TIMEOUT_S = 30.0  # from starting the daemons to every node idle
FRESH = ("state", "spool", "run", "log", "tmp", "munge")  # wiped at each fresh start
# a node that serves (its slurmd answers), with or without jobs
RUNNING_STATES = frozenset({"idle", "allocated", "mixed", "completing"})


def up(root: Path | None = None, *, nodes: int = 2, cpus_per_node: int | None = None
       ) -> Cluster:
    """Start a Slurm cluster of `nodes` nodes in `root` (default: `default_root()`), or return
    the one already running there; wait until every node is idle.

    `cpus_per_node` (default: this machine's CPU count) is what each node declares: the
    nodes share this machine's cores. RuntimeError when Slurm or munge is not installed
    (saying what to install) or the cluster does not come up (with its logs' last lines).
    """
    missing = available()
    if missing is not None:
        raise RuntimeError(missing)
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes={nodes!r} is not allowed; allowed: 1 to {MAX_NODES}")
    if cpus_per_node is not None and not 1 <= cpus_per_node <= 1024:
        raise ValueError(f"cpus_per_node={cpus_per_node!r} is not allowed; allowed: 1 to 1024")
    root = Path(root or default_root()).absolute()
    socket_path = root / "munge" / "munge.socket"
    if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
        raise ValueError(f"root={str(root)!r} is too long: munge's socket there would need "
                         f"{len(os.fsencode(socket_path))} bytes; allowed: a root whose "
                         f"munge/munge.socket takes at most {MAX_SOCKET_PATH}")
    running = status(root)
    if running is not None and running.daemons.get("munged") and running.daemons.get(
            "slurmctld"):  # up already: start the slurmd of a node that was killed, if any
        cluster = _same_shape(running.cluster, nodes, cpus_per_node)
        dead = [n for n in cluster.nodes if running.daemons.get(f"slurmd-{n}") is None]
        _start_nodes(cluster, dead)
        _wait_idle(cluster, RUNNING_STATES)
        return cluster
    down(root)
    cluster = _prepare(root, nodes, cpus_per_node or os.cpu_count() or 1, socket_path)
    try:
        _start_daemons(cluster, socket_path)
        _wait_idle(cluster)
    except Exception as exc:
        tails = _log_tails(cluster)
        down(root)
        raise RuntimeError(f"the Slurm cluster in {root} did not come up: {exc}\n{tails}"
                           ) from exc
    except BaseException:  # Ctrl-C while it starts: leave nothing running
        down(root)
        raise
    return cluster


def _same_shape(cluster: Cluster, nodes: int, cpus_per_node: int | None) -> Cluster:
    """`cluster` if it has `nodes` nodes of `cpus_per_node` CPUs; RuntimeError otherwise."""
    if len(cluster.nodes) != nodes or cpus_per_node not in (None, cluster.cpus_per_node):
        raise RuntimeError(
            f"a cluster of {len(cluster.nodes)} nodes with {cluster.cpus_per_node} CPUs each "
            f"already runs in {cluster.root}; stop it first (python -m dpsim cluster down)")
    return cluster


def _prepare(root: Path, nodes: int, cpus_per_node: int, socket_path: Path) -> Cluster:
    """Make `root` fresh (state wiped), choose free ports, write munge's key and slurm.conf."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.stat().st_uid != os.getuid():
        raise ValueError(f"root={str(root)!r} belongs to uid {root.stat().st_uid}, not to "
                         f"this user ({os.getuid()}); allowed: a folder of your own")
    for name in FRESH:
        shutil.rmtree(root / name, ignore_errors=True)
        (root / name).mkdir(mode=0o700)
    (root / "spool").chmod(0o755)
    ports: list[int] = []
    while len(ports) < nodes + 1:
        port = free_port()
        if port not in ports:
            ports.append(port)
    cluster = Cluster(root=root, ctld_port=ports[0], cpus_per_node=cpus_per_node,
                      node_ports={f"n{i + 1}": port for i, port in enumerate(ports[1:])})
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    cluster.conf.write_text(slurm_conf(
        root=root, cluster_name=f"dpsim{cluster.ctld_port}",
        ctld_host=socket.gethostname().split(".")[0], ctld_port=cluster.ctld_port,
        node_ports=cluster.node_ports, cpus_per_node=cpus_per_node, munge_socket=socket_path))
    cluster.save()
    return cluster


def _start_daemons(cluster: Cluster, socket_path: Path) -> None:
    """Start munged, slurmctld and each slurmd; each forks into the background itself."""
    root = cluster.root
    env = {**os.environ, **cluster.env(), MARKER: str(root)}
    munge = root / "munge"
    _daemon([program_path("munged"), "--force", f"--socket={socket_path}",
             f"--key-file={munge / 'munge.key'}", f"--seed-file={munge / 'munged.seed'}",
             f"--pid-file={root / 'run' / 'munged.pid'}",
             f"--log-file={root / 'log' / 'munged.log'}"], env, root)
    _wait_for(lambda: socket_path.exists(), f"munged's socket {socket_path}", 10.0)
    _daemon([program_path("slurmctld"), "-f", str(cluster.conf)], env, root)
    _start_nodes(cluster, list(cluster.nodes))


def _start_nodes(cluster: Cluster, nodes: list[str]) -> None:
    """Start the slurmd of each of `nodes` (`slurmd -N <node>`)."""
    env = {**os.environ, **cluster.env(), MARKER: str(cluster.root)}
    for node in nodes:
        _daemon([program_path("slurmd"), "-N", node, "-f", str(cluster.conf)], env,
                cluster.root)


def _daemon(command: list[str], env: dict[str, str], root: Path) -> None:
    """Run `command`, which forks its daemon and returns; RuntimeError when it fails."""
    with open(root / "log" / "start.log", "a") as log:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, timeout=30, check=False,
                              start_new_session=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}")


def _wait_for(ready: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll `ready()` every 50 ms until it is true; TimeoutError naming `what` after
    `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout_s:.0f} s")
        time.sleep(0.05)


def _wait_idle(cluster: Cluster, ready: frozenset[str] = frozenset({"idle"})) -> None:
    """Wait until sinfo shows every node of `cluster` in a state of `ready` (idle)."""
    def idle() -> bool:
        if not all(daemon_pids(cluster).values()):
            dead = [name for name, pid in daemon_pids(cluster).items() if pid is None]
            if time.monotonic() - started > 2.0:  # a daemon that writes no pid file: failed
                raise RuntimeError(f"not running: {', '.join(dead)}")
            return False
        states = {n.name: n.state for n in node_states(cluster)}
        return all(states.get(node) in ready for node in cluster.nodes)

    started = time.monotonic()
    _wait_for(idle, f"every node {' or '.join(sorted(ready))}", UP_TIMEOUT_S)


def _log_tails(cluster: Cluster, lines: int = 5) -> str:
    """The last `lines` lines of each daemon's log, for an error message."""
    parts = []
    for log in sorted((cluster.root / "log").glob("*.log")):
        try:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        parts.append(f"--- {log}\n" + "\n".join(tail))
    return "\n".join(parts)


def down(root: Path | None = None) -> None:
    """Stop the cluster in `root` (default: `default_root()`): its jobs, its daemons and
    every process left that belongs to it. RuntimeError when a process of it or a listener
    on one of its ports outlives this (naming them). Nothing to do when none was started."""
    cluster = Cluster.load(Path(root or default_root()).absolute())
    if cluster is None:
        return
    daemons = daemon_pids(cluster)
    if daemons.get("slurmctld") is not None:
        _cancel_all(cluster)
    order = [*(f"slurmd-{node}" for node in cluster.nodes), "slurmctld", "munged"]
    for name in order:
        pid = daemons.get(name)
        if pid is not None and end([pid], signal.SIGTERM, 5.0):
            end([pid], signal.SIGKILL, 2.0)
    left = cluster_pids(cluster)
    deadline = time.monotonic() + 5.0
    while left and time.monotonic() < deadline:
        kill_groups(left)
        time.sleep(0.05)
        left = [pid for pid in cluster_pids(cluster) if is_running(pid)]
    if left:
        raise RuntimeError(f"processes of the cluster in {cluster.root} outlived down: {left}")
    deadline = time.monotonic() + 5.0
    while (ports := [p for p in cluster.ports if listening(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if ports:
        raise RuntimeError(f"ports of the cluster in {cluster.root} still listen: {ports}")
    (cluster.root / "cluster.json").unlink(missing_ok=True)


def _cancel_all(cluster: Cluster) -> None:
    """Cancel every job in the queue and give them up to 3 s to leave it."""
    queued = slurm(cluster, "squeue", "-h", "-o", "%i", check=False, timeout_s=10)
    ids = queued.stdout.split() if queued.returncode == 0 else []
    if not ids:
        return
    slurm(cluster, "scancel", "--full", *ids, check=False, timeout_s=10)
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        done = slurm(cluster, "squeue", "-h", "-o", "%i", check=False, timeout_s=10)
        if done.returncode != 0 or not done.stdout.strip():
            return
        time.sleep(0.1)


def kill_node(cluster: Cluster, node: str) -> list[int]:
    """SIGKILL node `node`'s slurmd and every job process on it (the tasks whose
    SLURMD_NODENAME is `node` and their slurmstepd); return their pids.

    slurmctld marks the node DOWN once it misses its pings: SlurmdTimeout (10 s) and up to
    a ping interval later. A job on it then ends NODE_FAIL, and one submitted with
    `--requeue` goes back to the queue. `up()` starts the node's slurmd again; with
    ReturnToService=2 the node comes back idle.
    """
    cluster.node_addr(node)  # ValueError for a node not in the cluster
    slurmd = daemon_pids(cluster).get(f"slurmd-{node}")
    on_node = [pid for pid in cluster_pids(cluster)
               if f"SLURMD_NODENAME={node}".encode() in environ(pid)]
    parents = {parent for pid in on_node if (parent := parent_pid(pid)) is not None}
    stepds = [pid for pid in parents if pid in set(cluster_pids(cluster))
              and pid != slurmd and not environ_has_job(pid)]
    victims = sorted({*on_node, *stepds, *([slurmd] if slurmd is not None else [])})
    kill_groups(victims)
    return victims
