"""`Cluster`: where a running one-machine Slurm cluster lives and how to talk to it.

Plain data, written to `<root>/cluster.json` by `up` and read back by `status` and `down`.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "DPSIM_SLURM_ROOT"  # set on the cluster's daemons (and so their slurmstepd)


ROOT_VARIABLE = "DPSIM_SLURM_CLUSTER"  # names the default folder, when set


def default_root() -> Path:
    """The cluster's folder when none is given: `$DPSIM_SLURM_CLUSTER` if set, else
    `<tmp>/dpsim-slurm-<uid>` (one per user, in the system's temporary folder: it is gone
    after a reboot, as the daemons are)."""
    named = os.environ.get(ROOT_VARIABLE)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"dpsim-slurm-{os.getuid()}"


@dataclass(frozen=True)
class Cluster:
    """A Slurm cluster on this machine: slurmctld and one slurmd per node on 127.0.0.1.

    Run Slurm's commands against it with `env={**os.environ, **cluster.env()}`.
    """

    root: Path  # its folder: slurm.conf, state/, spool/, log/ (daemons'), run/ (pid files)
    ctld_port: int  # slurmctld's TCP port on 127.0.0.1
    node_ports: dict[str, int]  # each node's slurmd TCP port on 127.0.0.1
    cpus_per_node: int  # CPUs each node declares (they share this machine's cores)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node names, in order: n1, n2, ..."""
        return tuple(self.node_ports)

    @property
    def ports(self) -> tuple[int, ...]:
        """Every TCP port the daemons listen on: slurmctld's, then each slurmd's."""
        return (self.ctld_port, *self.node_ports.values())

    @property
    def conf(self) -> Path:
        """Its slurm.conf."""
        return self.root / "slurm.conf"

    def env(self) -> dict[str, str]:
        """What Slurm's commands (sbatch, srun, squeue, scontrol, scancel, sinfo) need to
        reach this cluster: SLURM_CONF. Jobs inherit it (sbatch exports the environment)."""
        return {"SLURM_CONF": str(self.conf)}

    def node_addr(self, name: str) -> str:
        """The address of node `name` (node names do not resolve; this is its NodeAddr)."""
        if name not in self.node_ports:
            raise ValueError(f"node={name!r} is not a node of this cluster; "
                             f"allowed: {', '.join(self.nodes)}")
        return "127.0.0.1"

    def save(self) -> None:
        """Write cluster.json in its folder."""
        record = asdict(self) | {"root": str(self.root)}
        (self.root / "cluster.json").write_text(json.dumps(record, indent=1) + "\n")

    @classmethod
    def load(cls, root: Path) -> Cluster | None:
        """The cluster recorded in `root`, or None when none was started there."""
        try:
            record = json.loads((root / "cluster.json").read_text())
        except (OSError, ValueError):
            return None
        return cls(root=Path(record["root"]), ctld_port=int(record["ctld_port"]),
                   node_ports={str(k): int(v) for k, v in record["node_ports"].items()},
                   cpus_per_node=int(record["cpus_per_node"]))
