"""`python -m dpsim cluster up|status|down`: the kit's Slurm cluster from the command line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dpsim.runtime.slurm.lifecycle import down, up
from dpsim.runtime.slurm.packages import available
from dpsim.runtime.slurm.status import status


def add_arguments(cluster: argparse.ArgumentParser) -> None:
    """The options of `python -m dpsim cluster`."""
    cluster.add_argument("action", choices=["up", "status", "down"])
    cluster.add_argument("--root", default=None,
                         help="the cluster's folder (default: $DPSIM_SLURM_CLUSTER, else "
                              "<tmp>/dpsim-slurm-<uid>)")
    cluster.add_argument("--nodes", type=int, default=2, help="up: how many slurmd nodes")
    cluster.add_argument("--cpus-per-node", type=int, default=None,
                         help="up: CPUs each node declares (default: this machine's)")


def main(action: str, root: str | None = None, nodes: int = 2,
         cpus_per_node: int | None = None) -> int:
    """Run `action` (up, status or down) on the cluster in `root`; return the exit code."""
    folder = Path(root) if root else None
    if action == "up":
        missing = available()
        if missing is not None:
            print(f"dpsim cluster up: {missing}", file=sys.stderr)
            return 1
        start = time.monotonic()
        try:
            cluster = up(folder, nodes=nodes, cpus_per_node=cpus_per_node)
        except (RuntimeError, ValueError) as exc:
            print(f"dpsim cluster up: {exc}", file=sys.stderr)
            return 1
        print(f"up in {time.monotonic() - start:.1f} s (measured)")
        now = status(cluster.root)
        print(now.describe() if now else f"cluster in {cluster.root}")
        print(f"use it: export SLURM_CONF={cluster.conf}   stop it: python -m dpsim cluster down"
              + (f" --root {cluster.root}" if folder else ""))
        return 0
    if action == "status":
        now = status(folder)
        if now is None:
            print("no Slurm cluster runs" + (f" in {folder}" if folder else "")
                  + " (python -m dpsim cluster up starts one)")
            return 1
        print(now.describe())
        return 0 if now.healthy else 1
    if action == "down":
        start = time.monotonic()
        try:
            down(folder)
        except RuntimeError as exc:
            print(f"dpsim cluster down: {exc}", file=sys.stderr)
            return 1
        print(f"down in {time.monotonic() - start:.1f} s (measured): no daemon, job process "
              "or listener of it is left")
        return 0
    raise ValueError(f"action={action!r} is not allowed; allowed: up, status, down")
