"""What runs inside a rank when tests/runtime/test_emulated_gpus.py emulates a GPU machine.

A rank on a machine with a GPU per rank joins an NCCL group, and an NCCL group serves CUDA
tensors only: a CPU tensor in one of its collectives raises "No backend type associated
with device type cpu". `init_process_group("cuda:gloo")` starts a gloo group that serves
CUDA only and raises that same error, so on a CPU machine it stands in for NCCL:
`cuda_only_rank` swaps the rank's default group (gloo, started by `launch`) for such a group
and makes `dist.get_backend()` say "nccl", so a rank function that follows the backend takes
its GPU branch, as it would there. A rank function that needs real CUDA tensors then stops
with torch's "Torch not compiled with CUDA enabled" (the test skips it with that reason);
one that keeps CPU tensors in an NCCL group fails as it would on the GPU machine.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import Any

NEEDS_CUDA = ("Torch not compiled with CUDA enabled", "no attribute '_cuda_")
# What torch.cuda.nccl.version() says in an emulated rank: torch's error logging asks for it
# when the backend says "nccl" (a CPU build has none, and that would hide the real error).
NCCL_VERSION = (2, 21, 5)
WRONG_DEVICE = "No backend type associated with device type"


def cuda_only_rank(rank: int, world_size: int, fn: Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any], prefix: str) -> Any:
    """`fn(rank, world_size, *args, **kwargs)` in a default group that serves CUDA only."""
    import torch
    import torch.distributed as dist

    dist.destroy_process_group()  # launch's gloo group
    client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                           world_size, is_master=False)
    dist.init_process_group("cuda:gloo", store=dist.PrefixStore(prefix, client), rank=rank,
                            world_size=world_size)
    real_get_backend = dist.get_backend

    def get_backend(group: Any = None) -> str:
        name = str(real_get_backend(group))
        return "nccl" if name == "cuda:gloo" else name

    dist.get_backend = get_backend  # type: ignore[assignment]
    torch.cuda.nccl.version = lambda: NCCL_VERSION
    try:
        return fn(rank, world_size, *args, **kwargs)
    finally:
        dist.get_backend = real_get_backend


def fresh_prefix() -> str:
    """A store key prefix of its own for one emulated group."""
    return f"emulated-{secrets.token_hex(6)}/"


class ScriptExit(Exception):
    """The script called os._exit(code)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"os._exit({code})")
        self.code = code


def torchrun_rank(rank: int, world_size: int, script: str, argv: list[str], gpus: int,
                  prefix: str) -> str:
    """Run `script` as torchrun's rank `rank` would on a machine with `gpus` GPUs.

    torch reports `gpus` CUDA GPUs and NCCL to the script; `torch.cuda.set_device` does
    nothing; the group the script starts is gloo as asked, or for "nccl" a gloo group that
    serves CUDA only. Returns the backend the script asked for.
    """
    import runpy
    import sys

    import torch
    import torch.distributed as dist

    dist.destroy_process_group()  # launch's gloo group: the script starts its own
    asked: list[str] = []
    real_init, real_get_backend = dist.init_process_group, dist.get_backend

    def init_process_group(backend: str | None = None, **kwargs: Any) -> None:
        asked.append(str(backend))
        client = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                               world_size, is_master=False)
        real_init("cuda:gloo" if backend == "nccl" else backend,
                  store=dist.PrefixStore(prefix, client), rank=rank, world_size=world_size,
                  **({"timeout": kwargs["timeout"]} if "timeout" in kwargs else {}))

    def get_backend(group: Any = None) -> str:
        name = str(real_get_backend(group))
        return "nccl" if name == "cuda:gloo" else name

    def exit_now(code: int) -> None:
        raise ScriptExit(code)

    torch.cuda.is_available = lambda: gpus > 0
    torch.cuda.device_count = lambda: gpus
    torch.cuda.set_device = lambda _device: None  # type: ignore[assignment]
    dist.is_nccl_available = lambda: True
    torch.cuda.nccl.version = lambda: NCCL_VERSION
    dist.init_process_group = init_process_group  # type: ignore[assignment]
    dist.get_backend = get_backend  # type: ignore[assignment]
    real_exit, os._exit = os._exit, exit_now  # type: ignore[assignment]
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
    except ScriptExit as done:
        if done.code != 0:
            raise
    finally:
        os._exit, dist.get_backend = real_exit, real_get_backend
    return asked[0] if asked else "none"
