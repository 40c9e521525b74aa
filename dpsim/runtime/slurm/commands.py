"""Running Slurm's commands (sbatch, scontrol, squeue, sinfo, scancel) against one cluster."""

from __future__ import annotations

import os
import subprocess

from dpsim.runtime.slurm.cluster import Cluster
from dpsim.runtime.slurm.packages import program_path


def slurm(cluster: Cluster, name: str, *args: str, timeout_s: float = 30.0,
          check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run Slurm's command `name` with `args` against `cluster`; with `check`, a non-zero exit
    raises RuntimeError carrying the command and its stderr."""
    command = [program_path(name), *args]
    done = subprocess.run(command, env={**os.environ, **cluster.env()}, capture_output=True,
                          text=True, timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()}")
    return done


def key_values(line: str) -> dict[str, str]:
    """One record of `scontrol show ... -o` as a dict (values hold no spaces, except the last
    fields such as Command=, which keep theirs)."""
    record: dict[str, str] = {}
    key = None
    for word in line.split(" "):
        name, sep, value = word.partition("=")
        if sep and name and (name[0].isupper() or name[0] == "_") and " " not in name:
            key = name
            record[key] = value
        elif key is not None and word:
            record[key] += " " + word
    return record
