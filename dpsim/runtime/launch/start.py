"""How rank processes start: forked from a server that has imported torch, or spawned.

A spawned rank is a fresh interpreter that imports torch (about 1.5 s of CPU per rank,
the larger part of a small launch). On Linux, ranks are instead forked from
multiprocess's fork server, a process started once per launching process that imports
torch and the rank module first and never runs anything else (no threads, no CUDA), so
every rank still starts clean. Launches that pass their own `env` are spawned: those
variables must be set before torch is imported (OMP_NUM_THREADS, for one, is read when
torch's OpenMP library loads). DPSIM_START_METHOD=spawn forces spawning. macOS has a
fork server too, but a process that forks after loading Apple's frameworks (as torch
does) may crash, which is why Python spawns there by default: ranks are spawned there.

A forked rank gets the launcher's environment and its standard output and error (file
descriptors 1 and 2 as they are at the launch: a notebook's or pytest's capture) handed
over when it starts, as a spawned rank inherits them; Python's `random` and numpy's global
generator get fresh seeds. One difference stays: forked ranks share the server's string
hash seed, so a set of strings iterates in the same order on every rank (spawned ranks
each draw their own unless PYTHONHASHSEED is set).
"""

from __future__ import annotations

import os
import sys
from typing import Any

START_METHODS = ("forkserver", "spawn")
# imported once in the fork server; each rank forked from it has them already
PRELOAD = ["torch", "torch.distributed", "dill", "dpsim.runtime.launch.rank"]


def start_method(user_env: dict[str, str]) -> str:
    """"forkserver" on Linux when `user_env` is empty, else "spawn"."""
    import multiprocess

    asked = os.environ.get("DPSIM_START_METHOD", "")
    if asked and asked not in START_METHODS:
        raise ValueError(f"DPSIM_START_METHOD={asked!r} is not known; allowed: "
                         f"{', '.join(START_METHODS)}")
    if asked == "spawn" or user_env or not sys.platform.startswith("linux") \
            or "forkserver" not in multiprocess.get_all_start_methods():
        return "spawn"
    return "forkserver"


def start_context(method: str) -> Any:
    """multiprocess's context for `method`; for the fork server, with its preload set."""
    import multiprocess

    ctx = multiprocess.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


class InheritedFd:
    """A file descriptor of the launcher, duplicated into the rank process as it starts
    (by multiprocess's own fd passing, as for a Pipe's ends); an int there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocess import reduction

        return _detach, (reduction.DupFd(self.fd),)


def _detach(dup: Any) -> int:
    fd: int = dup.detach()
    return fd


def launcher_stdio() -> tuple[InheritedFd, ...]:
    """The launcher's fds 1 and 2 for a forked rank (both or neither, when one is closed)."""
    try:
        for fd in (1, 2):
            os.fstat(fd)
    except OSError:
        return ()
    return InheritedFd(1), InheritedFd(2)
