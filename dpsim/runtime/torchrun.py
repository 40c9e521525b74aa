"""Start a training script under `torchrun` on this machine, bound to loopback.

`tests/runtime/test_torchrun.py` and `scripts/stress_torchrun.py` start `scripts/train_ddp.py` this
way: one node (`--standalone`) or several "nodes" over 127.0.0.1 (`--nnodes`), each
torchrun in its own session so that the caller can kill everything it started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from dpsim.runtime.launch.ports import loopback_ifname


def torchrun_command() -> list[str]:
    """The torchrun next to this Python, or `python -m torch.distributed.run`."""
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def loopback_env(pythonpath: Path) -> dict[str, str]:
    """This environment with gloo and the rendezvous on loopback, `pythonpath` first."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    ifname = loopback_ifname()  # "lo" on Linux, "lo0" on macOS; unset where none is found
    if ifname is not None:
        env["GLOO_SOCKET_IFNAME"] = ifname
    env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]
                                        ).rstrip(os.pathsep)
    return env


def start_torchrun(torchrun_args: Sequence[str], script: Path,
                   script_args: Sequence[str] = (), extra_env: Mapping[str, str] | None = None
                   ) -> subprocess.Popen[str]:
    """`torchrun <torchrun_args> <script> <script_args>` in its own session, run from the
    script's repository (its parent's parent), stdout and stderr together as text;
    `extra_env` is added to the loopback environment."""
    root = script.resolve().parents[1]
    env = loopback_env(root) | dict(extra_env or {})
    return subprocess.Popen([*torchrun_command(), *torchrun_args, str(script), *script_args],
                            cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
