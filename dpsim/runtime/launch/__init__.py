"""Run a Python function on N ranks of a real `torch.distributed` process group.

`launch(fn, world_size)` starts one fresh Python process per rank (the `multiprocess`
package: on Linux forked from its fork server, which imported torch once; spawned
elsewhere and when `env` is given: `start`), joins them into a process group and returns
`[fn(0, N), fn(1, N), ...]`. `fn` and its arguments are shipped with dill (globals it uses
included), so lambdas, closures and functions defined in a notebook cell work; the
launching script's `__main__` is not re-run in the ranks.

How it stays reliable in a notebook:

* the launching process hosts the rendezvous `TCPStore` on a socket it bound to
  `master_addr` with port 0 (the OS picks a free port), so concurrent launches never race
  for a port and, by default, nothing listens beyond loopback (gloo is pinned to the
  loopback interface too);
* ranks start `fn` only once all of them joined the group, and leave together; a join that
  fails with a transient connection error is retried with fresh processes;
* a rank that raises, dies or hangs is reported as `RankFailedError` or
  `LaunchTimeoutError` (saying of each hung rank whether it was still starting, blocked in
  a collective or running Python code, with its Python stack; `DeadlockError`, a
  `LaunchTimeoutError`, within seconds when every unfinished rank waits in
  torch.distributed and none uses CPU; a rank killed in native code is reported with the
  last lines it wrote on stderr, gloo's or NCCL's own message), and every rank process is
  stopped (SIGTERM, then SIGKILL) and reaped before `launch` returns or raises,
  KeyboardInterrupt included;
* rank processes kill themselves when the launching process dies (PR_SET_PDEATHSIG on
  Linux, a parent-watching thread elsewhere; a forked rank's parent is the fork server,
  which ends with the launcher), so a kernel restart leaves no orphans.

Only the standard library is imported at module level: torch is imported on use, after
the rank's environment variables are set.

The package, one job a module: `job` (`launch` and its join retries), `start` (fork
server or spawn), `rank` (what runs inside a rank process), `supervise` (watching and
stopping ranks), `states` (what a hung rank was doing), `deadlock` (noticing ranks that
all wait for one another, within seconds), `stderr_tail` (each rank's stderr passed on,
its last lines kept for the error), `pickling` (shipping with dill, naming what it cannot
ship), `ports` (the rendezvous store and free ports), `backend` (choosing gloo or nccl),
`errors`.
"""

from __future__ import annotations

from dpsim.runtime.launch.backend import BACKENDS, DEVICES, choose_backend
from dpsim.runtime.launch.errors import (
    DeadlockError,
    LaunchError,
    LaunchTimeoutError,
    RankFailedError,
)
from dpsim.runtime.launch.job import MAX_WORLD_SIZE, last_pids, launch
from dpsim.runtime.launch.ports import free_port

__all__ = [
    "BACKENDS",
    "DEVICES",
    "MAX_WORLD_SIZE",
    "DeadlockError",
    "LaunchError",
    "LaunchTimeoutError",
    "RankFailedError",
    "choose_backend",
    "free_port",
    "last_pids",
    "launch",
]

# Tracebacks and reprs name the errors where users import them from.
for _error in (DeadlockError, LaunchError, LaunchTimeoutError, RankFailedError):
    _error.__module__ = __name__
del _error
