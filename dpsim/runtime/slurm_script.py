"""A Slurm batch script that starts a training script with torchrun on every node.

One `srun` task per node runs `torchrun`, which starts that node's ranks; the first node of
the allocation hosts torchrun's c10d rendezvous, keyed by the job's id. Its address is read
from Slurm (`scontrol show node`: NodeAddr), since a node's name need not resolve. With no
GPUs per node the job is a CPU job (gloo), for a test cluster; the script is otherwise the
same. `python -m dpsim plan --sbatch FILE` writes one with the planner's prediction in its
header.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from dpsim.sim import require_int

MAX_NODES = 4096  # nodes of one job
MAX_RANKS_PER_NODE = 64  # torchrun processes on one node
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.,-]+")  # a partition, account or job name
_TIME = re.compile(r"(\d+-)?\d{1,2}(:\d{2}){0,2}")  # minutes, [D-]HH[:MM[:SS]]


@dataclass(frozen=True)
class JobSpec:
    """What the batch script asks Slurm for and what each node runs.

    nodes: nodes of the allocation; nproc_per_node: ranks torchrun starts on each;
    gpus_per_node: GPUs requested per node (0: a CPU job, gloo); train: the command each
    rank runs after `torchrun ...` (a script and its arguments, as a shell line); port: the
    rendezvous port on the first node; time: Slurm's time limit ([D-]HH:MM:SS); partition,
    account: "" leaves the cluster's default.
    """

    nodes: int
    nproc_per_node: int
    gpus_per_node: int
    train: str = "train.py"
    job_name: str = "dpsim"
    time: str = "01:00:00"
    partition: str = ""
    account: str = ""
    port: int = 29500
    header: Sequence[str] = field(default_factory=tuple)  # comment lines, without "# "

    def __post_init__(self) -> None:
        require_int("nodes", self.nodes, 1, MAX_NODES)
        require_int("nproc_per_node", self.nproc_per_node, 1, MAX_RANKS_PER_NODE)
        require_int("gpus_per_node", self.gpus_per_node, 0, MAX_RANKS_PER_NODE)
        require_int("port", self.port, 1024, 65535)
        try:
            words = shlex.split(self.train)
        except ValueError:  # an unclosed quote
            words = []
        if not words or "\n" in self.train:
            raise ValueError(f"train={self.train!r} is not allowed; allowed: a command on "
                             "one line, e.g. 'train.py --steps 100'")
        for name in ("job_name", "partition", "account"):
            value = getattr(self, name)
            if value and not _SLURM_NAME.fullmatch(value):
                raise ValueError(f"{name}={value!r} is not allowed; allowed: letters, digits "
                                 "and _ . , - (or empty for the cluster's default)")
        if not _TIME.fullmatch(self.time):
            raise ValueError(f"time={self.time!r} is not allowed; allowed: Slurm's time "
                             "limit, e.g. 30, 01:00:00 or 1-12:00:00")


def sbatch_script(spec: JobSpec) -> str:
    """The batch script's text: #SBATCH lines, then `srun torchrun` on every node."""
    lines = ["#!/bin/bash"]
    lines += [f"# {line}".rstrip() for line in spec.header]
    if spec.header:
        lines.append("#")
    lines += ["# one task per node: torchrun, which starts the node's ranks",
              f"#SBATCH --job-name={spec.job_name}",
              f"#SBATCH --nodes={spec.nodes}",
              "#SBATCH --ntasks-per-node=1"]
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    lines.append(f"#SBATCH --time={spec.time}")
    lines += [f"#SBATCH --{name}={value}" for name, value in
              (("partition", spec.partition), ("account", spec.account)) if value]
    lines += ["#SBATCH --output=%x-%j.out", ""]
    lines += ["set -euo pipefail",
              "# the first node hosts the rendezvous: its address from Slurm (a node's name",
              "# need not resolve)",
              'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
              "head_addr=$(scontrol show node \"$head_node\" "
              "| sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')"]
    if spec.gpus_per_node:
        lines += ["# on your cluster: the network NCCL should use, and what it chose",
                  "# export NCCL_SOCKET_IFNAME=ib0",
                  "# export NCCL_DEBUG=INFO"]
    else:
        lines.append("# no GPUs: the training script picks gloo")
    lines += ["export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}", "",
              "srun --kill-on-bad-exit=1 torchrun \\",
              f"    --nnodes={spec.nodes} --nproc-per-node={spec.nproc_per_node} \\",
              f'    --rdzv-backend=c10d --rdzv-endpoint="$head_addr:{spec.port}" '
              '--rdzv-id="$SLURM_JOB_ID" \\',
              f"    {spec.train.strip()}", ""]  # as written: a shell line ($SCRATCH expands)
    return "\n".join(lines)
