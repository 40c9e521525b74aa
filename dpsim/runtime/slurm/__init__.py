"""A real Slurm cluster on this machine: Debian's slurm-wlm (slurmctld, one slurmd per
"node") and munge, in a folder of its own, on 127.0.0.1 only (`python -m dpsim cluster`,
`make cluster`; chapter 12 and `python -m dpsim grade --slurm` run on it).

    cluster = up()                      # or the one already running in the same folder
    job_id = submit(cluster, Path("job.sh"), cwd=Path("."))
    state = wait(cluster, job_id, timeout_s=120)
    kill_node(cluster, "n2")            # a node's power cut: slurmctld marks it DOWN
    up()                                # starts n2's slurmd again
    down()                              # no daemon, job process or listener is left

Slurm's commands reach it with `env={**os.environ, **cluster.env()}`. The node names
(n1, n2, ...) do not resolve: their address is `cluster.node_addr(name)`. Without
accounting there is no sacct: `wait` reads scontrol while the job runs.
"""

from dpsim.runtime.slurm.cluster import Cluster, default_root
from dpsim.runtime.slurm.jobs import (
    RANK_LOG,
    JobState,
    StepInfo,
    cancel,
    job_log,
    rank_logs,
    requeue,
    submit,
    wait,
)
from dpsim.runtime.slurm.lifecycle import down, kill_node, up
from dpsim.runtime.slurm.packages import available
from dpsim.runtime.slurm.status import ClusterStatus, JobSummary, NodeStatus, status

__all__ = [
    "RANK_LOG",
    "Cluster",
    "ClusterStatus",
    "JobState",
    "JobSummary",
    "NodeStatus",
    "StepInfo",
    "available",
    "cancel",
    "default_root",
    "down",
    "job_log",
    "kill_node",
    "rank_logs",
    "requeue",
    "status",
    "submit",
    "up",
    "wait",
]
