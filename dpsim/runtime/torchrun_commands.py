"""The torchrun command lines for `scripts/train_ddp.py` on this machine, ready to paste.

gloo is pinned to the loopback interface by its name, which differs by OS ("lo" on Linux,
"lo0" on macOS); the name is looked up here, and the setting is left out where no loopback
interface is found (gloo then takes the interface of the host name). `python -m
dpsim.runtime.torchrun_commands` prints them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dpsim.runtime.launch.ports import free_port, loopback_ifname
from dpsim.sim import require_int


def loopback_interface() -> str | None:
    """This machine's loopback interface ("lo" on Linux, "lo0" on macOS), or None."""
    return loopback_ifname()


def env_prefix(ifname: str | None) -> str:
    """`GLOO_SOCKET_IFNAME=<ifname> ` before a command, or nothing when `ifname` is None."""
    return f"GLOO_SOCKET_IFNAME={ifname} " if ifname else ""


def torchrun_commands(script: Path, *, port: int, nproc: int = 2,
                      ifname: str | None = None, torchrun: Path | None = None) -> list[str]:
    """One node with `nproc` processes, then two "nodes" on 127.0.0.1:`port` (one per
    terminal), as lines with `#` comments. `torchrun` defaults to the one beside Python."""
    require_int("port", port, 1, 65535)
    require_int("nproc", nproc, 1, 1024)
    run = torchrun or Path(sys.executable).with_name("torchrun")
    env = env_prefix(ifname)
    lines = [f"# one node, {nproc} processes:",
             f"{env}{run} --standalone --nproc_per_node={nproc} {script}",
             "# two nodes on one machine (two terminals):"]
    lines += [f"{env}{run} --nnodes=2 --nproc_per_node=1 --node_rank={node_rank} "
              f"--rdzv-endpoint=127.0.0.1:{port} {script}" for node_rank in (0, 1)]
    return lines


def print_torchrun_commands(script: Path, nproc: int = 2) -> None:
    """Print `torchrun_commands` for this machine: its loopback name and a free port."""
    print("\n".join(torchrun_commands(script, port=free_port(), nproc=nproc,
                                      ifname=loopback_interface())))


if __name__ == "__main__":
    print_torchrun_commands(Path(__file__).resolve().parents[2] / "scripts" / "train_ddp.py")
