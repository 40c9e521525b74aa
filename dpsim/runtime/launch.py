"""Run a Python function on N ranks of a real `torch.distributed` process group.

`launch(fn, world_size)` starts one fresh Python process per rank (the `multiprocess`
package, spawn start method), joins them into a process group and returns
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
  `LaunchTimeoutError` (with the Python stacks of hung ranks), and every rank process is
  stopped (SIGTERM, then SIGKILL) and reaped before `launch` returns or raises,
  KeyboardInterrupt included;
* rank processes kill themselves when the launching process dies (PR_SET_PDEATHSIG on
  Linux, a parent-watching thread elsewhere), so a kernel restart leaves no orphans.

Only the standard library is imported at module level: torch is imported on use, after
the rank's environment variables are set.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import faulthandler
import ipaddress
import linecache
import os
import pickle
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dpsim.validation import require_choice, require_int, require_range

__all__ = [
    "BACKENDS",
    "MAX_WORLD_SIZE",
    "LaunchError",
    "LaunchTimeoutError",
    "RankFailedError",
    "free_port",
    "last_pids",
    "launch",
]

BACKENDS = ("auto", "gloo", "nccl")
MAX_WORLD_SIZE = 64

_TERMINATE_GRACE_S = 1.0  # SIGTERM -> SIGKILL, seconds
_EXIT_GRACE_S = 3.0  # after every rank returned, how long ranks may take to exit, seconds
_FAILURE_WINDOW_S = 0.25  # after a first failure, how long to collect others, seconds
_STACK_DUMP_WAIT_S = 1.0  # on timeout, how long to wait for the stuck ranks' stacks, seconds
_MAX_CHILD_TIMEOUT_S = 7 * 24 * 3600.0  # cap for timeouts handed to torch (inf -> 7 days)
_PARENT_POLL_S = 1.0  # the parent-watching thread's period, seconds
_POLL_S = 0.5  # the launcher's longest wait between checks of the ranks, seconds
_PR_SET_PDEATHSIG = 1

_pids_lock = threading.Lock()
_last_pids: list[int] = []
_keep_alive: list[Any] = []  # child side: objects whose fds faulthandler writes to


# --------------------------------------------------------------------------- errors


class LaunchError(Exception):
    """Base class of the errors `launch` raises when ranks do not all finish."""

    pids: list[int]


class RankFailedError(LaunchError, RuntimeError):
    """A rank raised, returned something unpicklable, or its process died.

    Attributes: `rank`, `traceback` (the rank's traceback text, "" if it died without
    one), `exitcode` (process exit code, negative = killed by that signal; None if it
    raised), `exc_type` (name of the exception class the rank raised, or None), `phase`
    (where it raised: "start" = loading fn, "init" = joining the process group, "fn",
    "result" = pickling the return value; None if it died), `other_failures` (one line per
    other rank that failed too), `pids`.
    """

    def __init__(
        self,
        rank: int,
        summary: str,
        traceback_text: str = "",
        *,
        exitcode: int | None = None,
        exc_type: str | None = None,
        phase: str | None = None,
        other_failures: Sequence[str] = (),
        pids: Sequence[int] = (),
    ) -> None:
        message = f"rank {rank} failed: {summary}"
        if traceback_text:
            message += f"\n\nTraceback from rank {rank}:\n{traceback_text.rstrip()}"
        if other_failures:
            message += "\n\nOther ranks that failed too (often as a consequence):\n"
            message += "\n".join(f"  {line}" for line in other_failures)
        super().__init__(message)
        self.rank = rank
        self.summary = summary
        self.traceback = traceback_text
        self.exitcode = exitcode
        self.exc_type = exc_type
        self.phase = phase
        self.other_failures = list(other_failures)
        self.pids = list(pids)


class LaunchTimeoutError(LaunchError, TimeoutError):
    """Some ranks did not finish within `timeout_s`; they were stopped.

    Attributes: `ranks` (the ranks that did not finish), `timeout_s` (seconds),
    `stacks` (rank -> Python stack text captured just before stopping it, when available),
    `pids`.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        timeout_s: float,
        *,
        finished: Sequence[int] = (),
        stacks: Mapping[int, str] | None = None,
        pids: Sequence[int] = (),
    ) -> None:
        stacks = dict(stacks or {})
        noun = "rank" if len(ranks) == 1 else "ranks"
        message = (
            f"{noun} {', '.join(map(str, ranks))} did not finish within timeout_s={timeout_s:g} s"
            f" (finished: {list(finished) if finished else 'none'}); they were stopped. "
            "A rank waits forever in a collective that another rank never calls; "
            "raise timeout_s if the work is only slow (start-up takes 1-3 s)."
        )
        for rank in sorted(stacks):
            message += f"\n\nWhere rank {rank} was:\n{stacks[rank].rstrip()}"
        super().__init__(message)
        self.ranks = list(ranks)
        self.timeout_s = timeout_s
        self.finished = list(finished)
        self.stacks = stacks
        self.pids = list(pids)


# --------------------------------------------------------------------------- helpers


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on `host` a moment ago (another process may take it).

    `launch` does not need this (its store binds port 0); it is for code that must name a
    port up front. Retry on EADDRINUSE when you bind it.
    """
    family, sockaddr = _resolve(host)
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind(sockaddr)
        port: int = sock.getsockname()[1]
        return port


def last_pids() -> list[int]:
    """Process ids of the ranks of the most recent `launch` in this process (for checks)."""
    with _pids_lock:
        return list(_last_pids)


def _is_loopback(addr: str) -> bool:
    """True for "localhost" and literal loopback addresses (127.0.0.0/8, ::1)."""
    if addr.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return False


def _loopback_ifname() -> str | None:
    """Name of the loopback network interface ("lo" on Linux, "lo0" on macOS), or None."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    for preferred in ("lo", "lo0"):
        if preferred in names:
            return preferred
    return next((name for name in names if name.startswith("lo")), None)


def _usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _resolve_backend(backend: str, world_size: int) -> str:
    """Turn "auto" into "nccl" or "gloo"; check that "nccl" can run `world_size` ranks."""
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = dist.is_nccl_available()
    if backend == "auto":
        return "nccl" if nccl and gpus >= world_size else "gloo"
    if backend == "nccl" and not (nccl and gpus >= world_size):
        raise ValueError(
            f"backend='nccl' needs one CUDA GPU per rank (world_size={world_size}) and a torch "
            f"built with NCCL; found {gpus} GPU(s), NCCL available: {nccl}. "
            "Use backend='gloo' (runs on CPU) or backend='auto'."
        )
    return backend


def _start_store(host: str, world_size: int, timeout_s: float) -> tuple[Any, str, int]:
    """Start the rendezvous TCPStore server in this process; return (store, address, port).

    The listening socket is bound here to `host` with port 0 (the OS picks a free port, so
    concurrent launches never race) and handed to the store, which then listens on `host`
    only; a plain `TCPStore(host, 0, ...)` would listen on every interface.
    """
    import torch.distributed as dist

    timeout = timedelta(seconds=min(timeout_s, _MAX_CHILD_TIMEOUT_S))
    family, sockaddr = _resolve(host)
    address = str(sockaddr[0])
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        raise ValueError(
            f"master_addr={host!r} cannot be bound here ({exc}); launch starts every rank on "
            "this machine, so give an address of this machine, e.g. '127.0.0.1'"
        ) from None
    try:
        port = int(sock.getsockname()[1])
        store = dist.TCPStore(
            address, port, world_size, is_master=True, wait_for_workers=False,
            timeout=timeout, master_listen_fd=sock.fileno(),
        )
        sock.detach()  # the store owns the socket now
        return store, address, port
    except (RuntimeError, OSError, TypeError, ValueError):
        sock.close()
    # Fallbacks (a torch without master_listen_fd): port 0, then free ports with retries.
    with contextlib.suppress(RuntimeError, OSError, ValueError):
        store = dist.TCPStore(
            address, 0, world_size, is_master=True, wait_for_workers=False, timeout=timeout
        )
        if store.port > 0:
            return store, address, int(store.port)
    last_error: Exception | None = None
    for _ in range(20):
        port = free_port(address)
        try:
            store = dist.TCPStore(
                address, port, world_size, is_master=True, wait_for_workers=False,
                timeout=timeout,
            )
            return store, address, port
        except (RuntimeError, OSError) as exc:  # EADDRINUSE surfaces as either
            last_error = exc
    raise RuntimeError(f"could not start a TCPStore on {host}: {last_error}")


def _resolve(host: str) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """(family, sockaddr with port 0) of `host`, preferring IPv4; ValueError if unknown."""
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ValueError(
            f"master_addr={host!r} cannot be resolved ({exc}); give a host name or IP of "
            "this machine, e.g. '127.0.0.1'"
        ) from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr


def _describe_exit(exitcode: int | None) -> str:
    """Human words for a process exit code (negative = killed by that signal)."""
    if exitcode is None:
        return "its process ended (exit code unknown) before returning a result"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        text = f"its process was killed by {name} (exit code {exitcode}) before returning a result"
        if name == "SIGKILL":
            text += " (killed from outside, often by the out-of-memory killer)"
        elif name in ("SIGSEGV", "SIGBUS", "SIGABRT"):
            text += "; it crashed in native code"
        return text
    return (
        f"its process exited with code {exitcode} before returning a result (if it never "
        "started fn, its own traceback is in the output above)"
    )


# --------------------------------------------------------------------------- child side


@dataclass(frozen=True)
class _RankSpec:
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


def _exit_with_parent(parent_pid: int) -> None:
    """Make this process die when the launching process dies."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() == parent_pid:
                return  # armed before the parent could die
            os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="dpsim-parent-watch", daemon=True).start()


def _rank_main(spec: _RankSpec, result_conn: Any, dump_conn: Any) -> None:
    """Entry point of a rank process: set up, run fn, send ("ok", bytes) or ("error", ...)."""
    _exit_with_parent(spec.parent_pid)
    # Ctrl-C / "interrupt kernel" is handled by the launching process, which stops ranks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(spec.env)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if hasattr(faulthandler, "register") and hasattr(signal, "SIGUSR1"):
        _keep_alive.append(dump_conn)
        faulthandler.register(signal.SIGUSR1, file=dump_conn.fileno(), all_threads=True)

    linecache.cache.update(spec.sources)  # notebook cells: tracebacks show their lines
    message: tuple[Any, ...]
    phase = "start"
    try:
        import dill

        fn, args, kwargs = dill.loads(spec.payload)
        import torch
        import torch.distributed as dist

        if spec.num_threads is not None:
            torch.set_num_threads(spec.num_threads)
        phase = "init"
        if spec.backend == "nccl":
            torch.cuda.set_device(spec.rank)
        timeout = timedelta(seconds=min(spec.timeout_s, _MAX_CHILD_TIMEOUT_S))
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
        store.set(f"joined/{spec.rank}", "1")
        store.wait([f"joined/{r}" for r in range(spec.world_size)], timeout)
        phase = "fn"
        result = fn(spec.rank, spec.world_size, *args, **kwargs)
        phase = "result"
        try:
            message = ("ok", dill.dumps(result, recurse=True))
        except Exception as exc:
            message = (
                "error",
                f"its return value ({type(result).__name__}) cannot be pickled to send it "
                f"back: {type(exc).__name__}: {exc}. Return plain Python values, numpy "
                "arrays or CPU tensors (e.g. t.detach().cpu()).",
                "",
                type(exc).__name__,
                phase,
            )
    except BaseException as exc:  # SystemExit / KeyboardInterrupt in fn are failures too
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # skip us
        tb_text = "".join(traceback.format_exception(type(exc), exc, tb))
        summary = f"{type(exc).__name__}: {exc}"
        if phase == "init":
            summary = f"while joining the process group: {summary}"
        message = ("error", summary, tb_text, type(exc).__name__, phase)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    result_conn.send_bytes(pickle.dumps(message))
    result_conn.close()
    if message[0] == "ok":
        # Leave together: a rank that tears down its connections while a peer is still
        # using them (even only finishing its connect) makes that peer fail.
        with contextlib.suppress(Exception):
            store.set(f"finished/{spec.rank}", "1")
            store.wait([f"finished/{r}" for r in range(spec.world_size)], timeout)
            dist.destroy_process_group()
    _fast_exit(0 if message[0] == "ok" else 1)


def _fast_exit(code: int) -> None:
    """End this rank: run atexit handlers, flush stdio, skip the interpreter teardown.

    With torch loaded the teardown takes ~0.5 s of CPU per rank, most of a small launch.
    """
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    os._exit(code)


# --------------------------------------------------------------------------- parent side


@dataclass
class _Failure:
    rank: int
    summary: str
    traceback: str = ""
    exitcode: int | None = None
    exc_type: str | None = None
    phase: str | None = None  # "start", "init", "fn", "result"; None if it died

    @property
    def died(self) -> bool:
        return self.exc_type is None


def _stop(procs: Sequence[Any], grace_s: float = _TERMINATE_GRACE_S) -> None:
    """SIGTERM every live process, SIGKILL those still alive after `grace_s`, reap all."""
    alive = [p for p in procs if p.is_alive()]
    interrupted = False
    try:
        for p in alive:
            with contextlib.suppress(OSError, ValueError):
                p.terminate()
        deadline = time.monotonic() + grace_s
        for p in alive:
            p.join(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:  # a second Ctrl-C: skip the grace period, still clean up
        interrupted = True
    for p in alive:
        if p.is_alive():
            with contextlib.suppress(OSError, ValueError):
                p.kill()
    for p in alive:
        p.join(5.0)
    if interrupted:
        raise KeyboardInterrupt


def _read_stacks(procs: Sequence[Any], dump_conns: Sequence[Any], ranks: Sequence[int]
                 ) -> dict[int, str]:
    """Ask stuck ranks for their Python stacks (SIGUSR1 -> faulthandler) and read them."""
    sigusr1 = getattr(signal, "SIGUSR1", None)
    if sigusr1 is None:
        return {}
    asked = []
    for rank in ranks:
        pid = procs[rank].pid
        if pid is not None and procs[rank].is_alive():
            with contextlib.suppress(OSError):
                os.kill(pid, sigusr1)
                asked.append(rank)
    chunks: dict[int, bytes] = {rank: b"" for rank in asked}
    deadline = time.monotonic() + _STACK_DUMP_WAIT_S
    quiet_since = time.monotonic()
    while asked and time.monotonic() < deadline:
        got = False
        for rank in asked:
            conn = dump_conns[rank]
            with contextlib.suppress(OSError, EOFError, ValueError):
                while conn.poll(0):
                    data = os.read(conn.fileno(), 65536)
                    if not data:
                        break
                    chunks[rank] += data
                    got = True
        if got:
            quiet_since = time.monotonic()
        elif all(chunks.values()) and time.monotonic() - quiet_since > 0.15:
            break
        time.sleep(0.02)
    stacks = {}
    for rank, data in chunks.items():
        lines = data.decode(errors="replace").splitlines()
        # Drop the frames of the launcher and multiprocess below fn (most recent call first).
        cut = next((i for i, line in enumerate(lines) if line.endswith(" in _rank_main")), None)
        if cut is not None:
            lines = lines[:cut]
        if lines:
            stacks[rank] = "\n".join(lines)
    return stacks


def _collect(
    procs: Sequence[Any], conns: Sequence[Any], deadline: float
) -> tuple[dict[int, Any], list[_Failure]]:
    """Wait for every rank's message or death until `deadline` (time.monotonic seconds)."""
    import dill
    from multiprocess.connection import wait

    world_size = len(procs)
    results: dict[int, Any] = {}
    failures: list[_Failure] = []
    first_failure_at: float | None = None

    def receive(rank: int) -> None:
        try:
            raw = conns[rank].recv_bytes()
        except (EOFError, OSError):
            procs[rank].join(1.0)
            failures.append(_Failure(rank, _describe_exit(procs[rank].exitcode),
                                     exitcode=procs[rank].exitcode))
            return
        message = pickle.loads(raw)
        if message[0] == "ok":
            try:
                results[rank] = dill.loads(message[1])
            except Exception as exc:
                failures.append(_Failure(
                    rank, f"its return value could not be unpickled in the launching process: "
                    f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                    exc_type=type(exc).__name__))
        else:
            _, summary, tb_text, exc_type, phase = message
            failures.append(_Failure(rank, summary, tb_text, exc_type=exc_type, phase=phase))

    while True:
        done = set(results) | {f.rank for f in failures}
        pending = [rank for rank in range(world_size) if rank not in done]
        now = time.monotonic()
        if failures and first_failure_at is None:
            first_failure_at = now
        if not pending or now >= deadline:
            break
        limit = deadline - now
        if first_failure_at is not None:
            limit = min(limit, first_failure_at + _FAILURE_WINDOW_S - now)
            if limit <= 0:
                break
        owners: dict[Any, tuple[str, int]] = {}
        for rank in pending:
            owners[conns[rank]] = ("conn", rank)
            owners[procs[rank].sentinel] = ("exit", rank)
        ready = wait(list(owners), timeout=min(limit, _POLL_S))
        # Messages first: a rank that sent its result and exited is a success.
        for obj in ready:
            kind, rank = owners[obj]
            if kind == "conn":
                receive(rank)
        handled = set(results) | {f.rank for f in failures}
        exited = {owners[obj][1] for obj in ready if owners[obj][0] == "exit"}
        # A dead rank whose forked children (DataLoader workers) still hold its sentinel and
        # pipe does not make them ready: also ask the OS (waitpid) which ranks have exited.
        exited |= {rank for rank in pending if procs[rank].exitcode is not None}
        for rank in sorted(exited):
            if rank not in handled:
                if conns[rank].poll(0):  # everything a rank sent is in the pipe once it exited
                    receive(rank)
                else:
                    procs[rank].join(1.0)
                    failures.append(_Failure(rank, _describe_exit(procs[rank].exitcode),
                                             exitcode=procs[rank].exitcode))
                handled.add(rank)
    return results, failures


_RANK_NAME_PREFIX = "dpsim-rank-"
_patch_lock = threading.Lock()


def _skip_main_reimport() -> None:
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
            if str(name).startswith(_RANK_NAME_PREFIX):
                data.pop("init_main_from_name", None)
                data.pop("init_main_from_path", None)
            return data

        get_preparation_data._dpsim_patched = True  # type: ignore[attr-defined]
        spawn.get_preparation_data = get_preparation_data


_MAX_SOURCES_CHARS = 1_000_000


def _interactive_sources() -> dict[str, tuple[Any, ...]]:
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


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError(f"env={env!r} is not allowed; give a dict of str -> str (or None)")
    return dict(env)


def launch(
    fn: Callable[..., Any],
    world_size: int = 2,
    *,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    backend: str = "auto",
    timeout_s: float = 120.0,
    master_addr: str = "127.0.0.1",
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args, **kwargs)` on `world_size` ranks; return results by rank.

    Each rank is a fresh Python process (spawned) in which the default process group is
    initialised when `fn` starts (`backend`: "gloo", "nccl", or "auto" = nccl when there is
    one GPU per rank, else gloo; with nccl, rank r uses cuda:r) and destroyed after `fn`
    returns. `fn`, `args`, `kwargs` and the return values travel with dill.

    `world_size`: 1..64 ranks. `timeout_s`: seconds (> 0, may be inf) for the whole launch,
    start-up (about 1.5 s per rank-core: each rank imports torch) included. `master_addr`:
    address of this machine the rendezvous binds to (loopback by default). `env`: extra
    environment variables for the ranks (set before torch is imported there). Unless
    OMP_NUM_THREADS is set, each rank uses usable-CPUs // world_size intra-op threads.
    Prints of the ranks go to this process's stdout/stderr (so to the notebook). Ranks
    end with os._exit after atexit handlers: files they write should be closed in `fn`.

    Raises `RankFailedError` when a rank raises or dies, `LaunchTimeoutError` when ranks do
    not finish in time, `ValueError` for bad arguments. All rank processes are gone when
    this returns or raises.
    """
    world_size = require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    require_choice("backend", backend, BACKENDS)
    timeout_s = float(require_range("timeout_s", timeout_s, 0, None, low_inclusive=False))
    if not callable(fn):
        raise ValueError(f"fn={fn!r} is not callable; give a function fn(rank, world_size, ...)")
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args={args!r} is not allowed; give a tuple")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"kwargs={kwargs!r} is not allowed; give a dict (or None)")
    if not isinstance(master_addr, str) or not master_addr:
        raise ValueError(f"master_addr={master_addr!r} is not allowed; give a host name or IP")
    user_env = _check_env(env)

    import dill

    try:
        payload = dill.dumps((fn, tuple(args), dict(kwargs or {})), recurse=True)
    except Exception as exc:
        raise ValueError(
            f"fn, args or kwargs cannot be pickled with dill to ship them to the ranks: "
            f"{type(exc).__name__}: {exc}. Create such objects (locks, open files, "
            "generators) inside fn instead."
        ) from exc
    resolved = _resolve_backend(backend, world_size)
    sources = _interactive_sources()

    base_env: dict[str, str] = {}
    if _is_loopback(master_addr):
        ifname = _loopback_ifname()
        if ifname is not None:
            base_env["GLOO_SOCKET_IFNAME"] = ifname
            if resolved == "nccl":
                base_env["NCCL_SOCKET_IFNAME"] = ifname
    base_env.update(user_env)
    num_threads = None
    if "OMP_NUM_THREADS" not in base_env and "OMP_NUM_THREADS" not in os.environ:
        num_threads = max(1, _usable_cpus() // world_size)

    import multiprocess

    ctx = multiprocess.get_context("spawn")
    _skip_main_reimport()
    job = _Job(
        ctx=ctx, payload=payload, world_size=world_size, backend=resolved,
        master_addr=master_addr, timeout_s=timeout_s, env=base_env, num_threads=num_threads,
        sources=sources,
    )
    deadline = time.monotonic() + timeout_s
    for attempt in range(1, _JOIN_ATTEMPTS + 1):
        try:
            return job.run(deadline)
        except RankFailedError as err:
            if attempt == _JOIN_ATTEMPTS or not _is_transient_join_failure(err):
                raise
            print(
                f"dpsim.launch: rank {err.rank} could not join the process group "
                f"({err.summary.splitlines()[0][:160]}); no rank had started fn, starting "
                f"all {world_size} ranks again (attempt {attempt + 1} of {_JOIN_ATTEMPTS})",
                file=sys.stderr, flush=True,
            )
    raise AssertionError("unreachable")  # pragma: no cover


_JOIN_ATTEMPTS = 3
_TRANSIENT_JOIN_ERRORS = (
    "connectFullMesh", "Connection closed by peer", "Connection reset by peer",
    "Connect timeout", "Broken pipe",
)


def _is_transient_join_failure(err: RankFailedError) -> bool:
    """True for a flaky gloo/NCCL connection error while ranks were joining the group.

    Gloo's full-mesh connect occasionally fails on a loaded machine ("Connection closed by
    peer"). Ranks only start fn after all joined, so starting the group again is safe.
    """
    return err.phase == "init" and any(text in err.summary for text in _TRANSIENT_JOIN_ERRORS)


@dataclass
class _Job:
    """One `launch` call's fixed inputs; `run` starts the ranks once and collects them."""

    ctx: Any
    payload: bytes
    world_size: int
    backend: str
    master_addr: str
    timeout_s: float
    env: dict[str, str]
    num_threads: int | None
    sources: dict[str, tuple[Any, ...]]

    def run(self, deadline: float) -> list[Any]:
        """Start all ranks, wait until `deadline` (time.monotonic s), stop them, return."""
        world_size = self.world_size
        store, store_host, store_port = _start_store(self.master_addr, world_size,
                                                     self.timeout_s)
        store_prefix = f"dpsim-{secrets.token_hex(8)}/"
        procs: list[Any] = []
        conns: list[Any] = []
        dump_conns: list[Any] = []
        try:
            for rank in range(world_size):
                rank_env = dict(self.env)
                rank_env.update(
                    MASTER_ADDR=store_host, MASTER_PORT=str(store_port), RANK=str(rank),
                    LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                    LOCAL_WORLD_SIZE=str(world_size),
                )
                spec = _RankSpec(
                    rank=rank, world_size=world_size, backend=self.backend,
                    store_host=store_host, store_port=store_port, timeout_s=self.timeout_s,
                    parent_pid=os.getpid(), payload=self.payload, store_prefix=store_prefix,
                    env=rank_env, num_threads=self.num_threads, sources=self.sources,
                )
                result_r, result_w = self.ctx.Pipe(duplex=False)
                dump_r, dump_w = self.ctx.Pipe(duplex=False)
                conns.append(result_r)
                dump_conns.append(dump_r)
                proc = self.ctx.Process(target=_rank_main, args=(spec, result_w, dump_w),
                                        name=f"{_RANK_NAME_PREFIX}{rank}", daemon=False)
                procs.append(proc)
                try:
                    proc.start()
                finally:
                    result_w.close()
                    dump_w.close()
                with _pids_lock:
                    _last_pids[:] = [p.pid for p in procs if p.pid is not None]
            pids = [p.pid for p in procs]

            results, failures = _collect(procs, conns, deadline)
            if failures:
                failures.sort(key=lambda f: not f.died)  # a dead process is the likely cause
                first, others = failures[0], failures[1:]
                _stop(procs)
                raise RankFailedError(
                    first.rank, first.summary, first.traceback, exitcode=first.exitcode,
                    exc_type=first.exc_type, phase=first.phase,
                    other_failures=[f"rank {f.rank}: {f.summary}" for f in others], pids=pids,
                )
            stuck = [rank for rank in range(world_size) if rank not in results]
            if stuck:
                stacks = _read_stacks(procs, dump_conns, stuck)
                _stop(procs)
                raise LaunchTimeoutError(stuck, self.timeout_s, finished=sorted(results),
                                         stacks=stacks, pids=pids)
            exit_deadline = time.monotonic() + _EXIT_GRACE_S
            for p in procs:
                p.join(max(0.0, exit_deadline - time.monotonic()))
            return [results[rank] for rank in range(world_size)]
        finally:
            _stop(procs)
            for conn in conns + dump_conns:
                with contextlib.suppress(OSError):
                    conn.close()
            for p in procs:
                with contextlib.suppress(ValueError, AttributeError):
                    p.close()
            del store
