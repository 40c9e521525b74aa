"""What runs inside a rank process: its spec, its entry point, and how it lives and ends.

The launcher starts `rank_main` in a spawned process; the spawn pickles the target and
its `RankSpec` by reference to this module, which the rank then imports.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import linecache
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from dpsim.runtime.launch.pickling import dumps, unpicklable_parts
from dpsim.runtime.launch.ports import torch_timeout
from dpsim.runtime.process_exit import exit_without_teardown

_PARENT_POLL_S = 1.0  # the parent-watching thread's period, seconds
_PR_SET_PDEATHSIG = 1
RANK_NAME_PREFIX = "dpsim-rank-"
_MAX_SOURCES_CHARS = 1_000_000

_keep_alive: list[Any] = []  # child side: objects whose fds faulthandler writes to
_patch_lock = threading.Lock()


@dataclass(frozen=True)
class RankSpec:
    """What one rank process needs; pickled into the child by reference to this module."""

    rank: int
    world_size: int
    backend: str
    store_host: str
    store_port: int
    timeout_s: float
    parent_pid: int
    payload: bytes  # dill bytes of (fn, args, kwargs)
    store_prefix: str = "dpsim/"
    env: dict[str, str] = field(default_factory=dict)
    num_threads: int | None = None
    sources: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # linecache entries
    forked: bool = False  # from the fork server: `env` is the launcher's whole environment
    stdio: tuple[Any, ...] = ()  # the launcher's fds 1 and 2, handed over when forked
    stderr_fd: Any = None  # write end of the pipe the launcher reads this rank's fd 2 from


# --------------------------------------------------------------------------- launcher side


def skip_main_reimport() -> None:
    """Stop spawned ranks from re-running the launching script's `__main__` module.

    multiprocess's spawn re-imports `__main__` in each child (as `__mp_main__`), which
    re-runs a script's unguarded top-level code. Ranks do not need it: dill ships `fn` and
    the globals it uses by value. The patch only touches processes named "dpsim-rank-*".
    """
    from multiprocess import spawn

    with _patch_lock:
        original = getattr(spawn, "get_preparation_data", None)
        if original is None or getattr(original, "_dpsim_patched", False):
            return

        def get_preparation_data(name: str) -> dict[str, Any]:
            data: dict[str, Any] = original(name)
            if str(name).startswith(RANK_NAME_PREFIX):
                data.pop("init_main_from_name", None)
                data.pop("init_main_from_path", None)
            return data

        get_preparation_data._dpsim_patched = True  # type: ignore[attr-defined]
        spawn.get_preparation_data = get_preparation_data


def interactive_sources() -> dict[str, tuple[Any, ...]]:
    """linecache entries of code that has no file (notebook cells), up to ~1 MB of text."""
    found: dict[str, tuple[Any, ...]] = {}
    total = 0
    for name, entry in list(linecache.cache.items()):
        if len(entry) != 4 or entry[1] is not None or not isinstance(entry[2], list):
            continue  # file-backed entries (the rank reads the file itself) or lazy ones
        size = sum(len(line) for line in entry[2])
        if total + size > _MAX_SOURCES_CHARS:
            break
        found[name] = tuple(entry)
        total += size
    return found


# --------------------------------------------------------------------------- rank side


def rank_main(spec: RankSpec, result_conn: Any, dump_conn: Any) -> None:
    """Entry point of a rank process: set up, run fn, send ("ok", bytes) or ("error", ...)."""
    _set_up_process(spec, dump_conn)
    message, store = _run_fn(spec)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    result_conn.send_bytes(pickle.dumps(message))
    result_conn.close()
    if message[0] == "ok":
        _leave_together(spec, store)
    exit_without_teardown(0 if message[0] == "ok" else 1)


def _set_up_process(spec: RankSpec, dump_conn: Any) -> None:
    """Die with the launcher, ignore Ctrl-C, set the env, line-buffer stdio, arm stack dumps."""
    _exit_with_parent(spec.parent_pid)
    # Ctrl-C / "interrupt kernel" is handled by the launching process, which stops ranks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec.forked:  # the server's stdio, environment and seeds are from its own start
        _let_the_fork_server_end()
        _fresh_numpy_seed()
        for target, fd in zip((1, 2), spec.stdio, strict=False):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
    if spec.stderr_fd is not None:  # the launcher passes it on and keeps the last lines
        os.dup2(spec.stderr_fd, 2)
        os.close(spec.stderr_fd)
    os.environ.update(spec.env)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if hasattr(faulthandler, "register") and hasattr(signal, "SIGUSR1"):
        _keep_alive.append(dump_conn)
        faulthandler.register(signal.SIGUSR1, file=dump_conn.fileno(), all_threads=True)
    linecache.cache.update(spec.sources)  # notebook cells: tracebacks show their lines


def _run_fn(spec: RankSpec) -> tuple[tuple[Any, ...], Any]:
    """Load fn, join the group, call fn; return (message for the launcher, store or None).

    The launcher cuts a hung rank's stack at the first frame of `RANK_FRAMES`.
    """
    store: Any = None
    phase = "start"
    try:
        import dill

        fn, args, kwargs = dill.loads(spec.payload)
        import torch
        import torch.distributed

        if spec.num_threads is not None:
            torch.set_num_threads(spec.num_threads)
        phase = "init"
        store = join_group(spec)
        phase = "fn"
        result = fn(spec.rank, spec.world_size, *args, **kwargs)
        phase = "result"
        return _result_message(result), store
    except BaseException as exc:  # SystemExit / KeyboardInterrupt in fn are failures too
        tb_text = "".join(traceback.format_exception(type(exc), exc, _user_frames(exc)))
        summary = f"{type(exc).__name__}: {exc}"
        if phase == "init":
            summary = f"while joining the process group: {summary}"
        return ("error", summary, tb_text, type(exc).__name__, phase), store


def _let_the_fork_server_end() -> None:
    """Close this rank's copy of the fork server's "alive" pipe.

    The server exits when every holder of that pipe's write end is gone; each forked
    process gets a copy. Closed here, the launcher's death ends the server, and the server's
    death kills this rank (PR_SET_PDEATHSIG), even while the dead launcher is a zombie.
    """
    from multiprocess import forkserver

    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None


def _fresh_numpy_seed() -> None:
    """Give numpy's global generator fresh entropy, as a spawned rank's has (Python's
    `random` reseeds itself after a fork; numpy's, imported with torch, would not)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _user_frames(exc: BaseException) -> TracebackType | None:
    """`exc`'s traceback without the leading frames of this module (the rank's own code)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") == __name__:
        tb = tb.tb_next
    return tb


def join_group(spec: RankSpec) -> Any:
    """Join the default process group, then wait until every rank joined; return the store."""
    import torch
    import torch.distributed as dist

    if spec.backend == "nccl":
        torch.cuda.set_device(spec.rank)
    timeout = torch_timeout(spec.timeout_s)
    client = dist.TCPStore(
        spec.store_host, spec.store_port, spec.world_size, is_master=False, timeout=timeout
    )
    # Keys under a per-launch prefix: a stray client of some other, dead job that still
    # retries this port number cannot mix its rendezvous keys with ours.
    store = dist.PrefixStore(spec.store_prefix, client)
    dist.init_process_group(
        spec.backend, store=store, rank=spec.rank, world_size=spec.world_size,
        timeout=timeout,
    )
    # No rank starts fn before every rank has joined: if one fails to join, fn has run
    # nowhere and the launcher may safely start the whole group again.
    store.set(joined_key(spec.rank), "1")
    store.wait([joined_key(r) for r in range(spec.world_size)], timeout)
    return store


def joined_key(rank: int) -> str:
    """The store key a rank sets once it joined the process group (the launcher reads it)."""
    return f"joined/{rank}"


def _result_message(result: Any) -> tuple[Any, ...]:
    """("ok", dill bytes of `result`), or the "error" message when it cannot be pickled."""
    try:
        return ("ok", dumps(result))
    except Exception as exc:
        parts = unpicklable_parts("result", result) or [f"result ({type(result).__name__})"]
        return (
            "error",
            f"its return value ({type(result).__name__}) cannot be pickled to send it "
            f"back: {type(exc).__name__}: {exc}. What cannot be pickled: "
            f"{'; '.join(parts)}. Return plain Python values, numpy arrays or CPU tensors "
            "(e.g. t.detach().cpu()).",
            "",
            type(exc).__name__,
            "result",
        )


def _leave_together(spec: RankSpec, store: Any) -> None:
    """Wait until every rank finished fn, then destroy the process group (errors ignored).

    A rank that tears down its connections while a peer is still using them (even only
    finishing its connect) makes that peer fail.
    """
    with contextlib.suppress(Exception):
        import torch.distributed as dist

        store.set(f"finished/{spec.rank}", "1")
        store.wait([f"finished/{r}" for r in range(spec.world_size)],
                   torch_timeout(spec.timeout_s))
        dist.destroy_process_group()


# The rank's own frames between the process entry and fn: a hung rank's stack is cut at
# the first of them, so it shows fn and what fn called.
RANK_FRAMES = tuple(f.__name__ for f in (
    rank_main, _set_up_process, _run_fn, join_group, _result_message, _leave_together))


def _exit_with_parent(parent_pid: int) -> None:
    """Make this process die when the launching process (`parent_pid`) dies.

    A spawned rank is the launcher's child; a rank forked from the fork server is the
    server's, and the server exits when the launcher does. Either way the kernel kills the
    rank when its parent dies, and a thread also watches the launcher itself.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() == parent_pid:
                return  # a spawned rank, armed before its parent could die
    parent = os.getppid()
    if not _alive(parent_pid) or parent == 1:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent and _alive(parent_pid):
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="dpsim-parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    """Whether process `pid` exists and, where /proc tells, is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
