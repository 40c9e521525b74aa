"""The slurm.conf of a one-machine cluster: slurmctld and one slurmd per "node", all on
127.0.0.1 at ports of their own, munge at its own socket, no accounting and no cgroups.

This is the recipe Debian's Slurm 22.05 accepts for several slurmd on one host: every node
has `NodeHostname=localhost NodeAddr=127.0.0.1` and its own `Port`, and each slurmd is
started as `slurmd -N <node>`. Node names do not resolve; their address is `NodeAddr`.
"""

from __future__ import annotations

import getpass
from pathlib import Path

KILL_WAIT_S = 5  # seconds between a cancelled step's SIGTERM and SIGKILL (Slurm's default: 30)
SLURMD_TIMEOUT_S = 10  # a slurmd silent this long marks its node DOWN (Slurm's default: 300)
# a step's credential lives this long (a step launched later fails); a requeued job may start
# again CRED_EXPIRE_S + 1 s after its requeue (Slurm's default: 120 s, so 121 s)
CRED_EXPIRE_S = 10


def slurm_conf(*, root: Path, cluster_name: str, ctld_host: str, ctld_port: int,
               node_ports: dict[str, int], cpus_per_node: int, munge_socket: Path) -> str:
    """The text of slurm.conf for a cluster whose files live in `root`."""
    user = getpass.getuser()
    lines = [
        "# written by dpsim.runtime.slurm (python -m dpsim cluster up); rewritten on each start",
        f"ClusterName={cluster_name}",
        f"SlurmctldHost={ctld_host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket},cred_expire={CRED_EXPIRE_S}",
        "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",  # bind 127.0.0.1, not 0.0.0.0
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",  # jobs share a node by CPUs (a job array's tasks)
        # the scheduler passes every second (Slurm's defaults: 60 s and 30 s), so a job that
        # becomes eligible with no event to wake the scheduler (a requeue's hold ends) starts
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        "ReturnToService=2",  # a restarted slurmd brings its DOWN node back
        f"SlurmdTimeout={SLURMD_TIMEOUT_S}",
        f"KillWait={KILL_WAIT_S}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        f"TmpFS={root / 'tmp'}",
    ]
    for name, port in node_ports.items():
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                     f"Port={port} CPUs={cpus_per_node} State=UNKNOWN")
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"
