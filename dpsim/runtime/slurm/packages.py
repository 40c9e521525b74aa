"""Whether this machine has what the kit's Slurm cluster runs: Slurm's daemons, its commands
and munge (Debian's slurmctld, slurmd, slurm-client and munge; `.ci/install-slurm`)."""

from __future__ import annotations

import os
import platform
import shutil

# each program the cluster runs, and the Debian package that holds it
PROGRAMS: dict[str, str] = {
    "slurmctld": "slurmctld", "slurmd": "slurmd", "munged": "munge",
    "sbatch": "slurm-client", "srun": "slurm-client", "scontrol": "slurm-client",
    "sinfo": "slurm-client", "squeue": "slurm-client", "scancel": "slurm-client",
}
_SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")  # daemons live here, off a user's PATH


def program(name: str) -> str | None:
    """The path of Slurm's or munge's program `name` on PATH or in the sbin folders, or None."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    return shutil.which(name, path=path)


def program_path(name: str) -> str:
    """The path of program `name`; RuntimeError saying what to install when it is missing."""
    found = program(name)
    if found is None:
        raise RuntimeError(available() or f"{name} is not installed")
    return found


def available() -> str | None:
    """None when slurmctld, slurmd, munged and Slurm's commands are installed; otherwise one
    sentence saying what is missing and what to install on this kind of machine."""
    missing = [name for name in PROGRAMS if program(name) is None]
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(PROGRAMS[name] for name in missing))
    system = platform.system()
    if system == "Darwin":
        where = ("macOS has no Slurm package: run the cluster in a Linux machine or "
                 "container (Debian or Ubuntu) and install them there with apt")
    elif "microsoft" in platform.release().lower():
        where = (f"on WSL2, inside the Linux distribution: sudo apt-get install {packages} "
                 "(systemd is not needed: the kit starts the daemons itself)")
    else:
        where = (f"on Debian or Ubuntu: sudo apt-get install {packages} "
                 "(or bash .ci/install-slurm); elsewhere your distribution's Slurm and munge")
    return f"Slurm is not installed here (missing: {', '.join(missing)}); {where}."
