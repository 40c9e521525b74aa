"""`status`: a cluster's daemons, its nodes' states and its jobs, as plain data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpsim.runtime.slurm.cluster import Cluster, default_root
from dpsim.runtime.slurm.commands import slurm
from dpsim.runtime.slurm.processes import daemon_pids


@dataclass(frozen=True)
class NodeStatus:
    """One node as sinfo reports it."""

    name: str
    state: str  # idle, allocated, mixed, down, drained, ... (sinfo's %T, lower case)
    cpus: int


@dataclass(frozen=True)
class JobSummary:
    """One job (or one task of a job array) as squeue reports it."""

    job_id: str  # "12", or "12_3" for task 3 of array job 12
    name: str
    state: str  # PENDING, RUNNING, COMPLETING, ...
    nodes: str  # the node list ("n[1-2]"), or the reason it waits


@dataclass(frozen=True)
class ClusterStatus:
    """What `python -m dpsim cluster status` prints."""

    cluster: Cluster
    daemons: dict[str, int | None]  # munged, slurmctld, slurmd-<node>: pid, None if not running
    nodes: tuple[NodeStatus, ...]
    jobs: tuple[JobSummary, ...]

    @property
    def healthy(self) -> bool:
        """Every daemon runs and every node is up (idle, allocated or mixed)."""
        return (all(self.daemons.values()) and len(self.nodes) == len(self.cluster.nodes)
                and all(n.state.rstrip("*") in ("idle", "allocated", "mixed", "completing")
                        for n in self.nodes))

    def describe(self) -> str:
        """Several lines for a person."""
        lines = [f"Slurm cluster in {self.cluster.root} (SLURM_CONF={self.cluster.conf})"]
        for name, pid in self.daemons.items():
            lines.append(f"  {name:<12} {'pid ' + str(pid) if pid else 'NOT RUNNING'}")
        ports = ", ".join(str(p) for p in self.cluster.ports)
        lines.append(f"  listening on 127.0.0.1 ports {ports}")
        lines.extend(f"  node {n.name}: {n.state}, {n.cpus} CPUs" for n in self.nodes)
        lines.append(f"  jobs: {len(self.jobs) or 'none'}")
        lines.extend(f"    {j.job_id} {j.name} {j.state} {j.nodes}" for j in self.jobs)
        return "\n".join(lines)


def node_states(cluster: Cluster) -> tuple[NodeStatus, ...]:
    """Each node's state from sinfo (empty when slurmctld does not answer)."""
    done = slurm(cluster, "sinfo", "-h", "-N", "-o", "%N|%T|%c", check=False, timeout_s=15)
    if done.returncode != 0:
        return ()
    nodes = {}
    for line in done.stdout.splitlines():
        name, state, cpus = line.split("|")
        nodes[name] = NodeStatus(name, state.lower(), int(cpus))
    return tuple(nodes.values())


def jobs_in_queue(cluster: Cluster) -> tuple[JobSummary, ...]:
    """Every job slurmctld still holds in its queue (squeue -r: array tasks one by one)."""
    done = slurm(cluster, "squeue", "-h", "-r", "-o", "%i|%j|%T|%R", check=False, timeout_s=15)
    if done.returncode != 0:
        return ()
    return tuple(JobSummary(*line.split("|", 3)) for line in done.stdout.splitlines()
                 if line.count("|") >= 3)


def status(root: Path | None = None) -> ClusterStatus | None:
    """The cluster started in `root` (default: `default_root()`), or None when none runs
    there (no cluster recorded, or none of its daemons running)."""
    cluster = Cluster.load(root or default_root())
    if cluster is None:
        return None
    daemons = daemon_pids(cluster)
    if not any(daemons.values()):
        return None
    ctld = daemons.get("slurmctld") is not None
    return ClusterStatus(cluster, daemons, node_states(cluster) if ctld else (),
                         jobs_in_queue(cluster) if ctld else ())
