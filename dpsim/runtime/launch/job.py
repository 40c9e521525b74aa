"""`launch`: check the arguments, start the ranks, collect them, retry a flaky join."""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dpsim.runtime.launch.backend import BACKENDS, choose_backend
from dpsim.runtime.launch.deadlock import Watch, describe
from dpsim.runtime.launch.errors import DeadlockError, LaunchTimeoutError, RankFailedError
from dpsim.runtime.launch.pickling import describe_unpicklable, dumps
from dpsim.runtime.launch.ports import is_loopback, loopback_ifname, start_store
from dpsim.runtime.launch.rank import (
    RANK_NAME_PREFIX,
    RankSpec,
    interactive_sources,
    rank_main,
    skip_main_reimport,
)
from dpsim.runtime.launch.start import (
    InheritedFd,
    launcher_stdio,
    start_context,
    start_method,
)
from dpsim.runtime.launch.states import joined_ranks, rank_state
from dpsim.runtime.launch.stderr_tail import StderrTail, last_words
from dpsim.runtime.launch.supervise import collect, read_stacks, stop, trim_stack
from dpsim.sim import require_choice, require_int, require_range

__all__ = ["MAX_WORLD_SIZE", "last_pids", "launch"]

MAX_WORLD_SIZE = 64

_EXIT_GRACE_S = 3.0  # after every rank returned, how long ranks may take to exit, seconds
_JOIN_ATTEMPTS = 3
_TRANSIENT_JOIN_ERRORS = (
    "connectFullMesh", "Connection closed by peer", "Connection reset by peer",
    "Connect timeout", "Broken pipe",
)

_PICKLE_FIX = (
    "Create such objects inside fn (generators, sockets, database connections, "
    "multiprocessing queues and locks, DataLoader iterators), or pass what they are made "
    "from (a path, a size, a seed)."
)

_pids_lock = threading.Lock()
_last_pids: list[int] = []


def last_pids() -> list[int]:
    """Process ids of the ranks of the most recent `launch` in this process (for checks)."""
    with _pids_lock:
        return list(_last_pids)


def launch(
    fn: Callable[..., Any],
    world_size: int = 2,
    *,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    backend: str = "auto",
    device: str = "auto",
    timeout_s: float = 120.0,
    master_addr: str = "127.0.0.1",
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args, **kwargs)` on `world_size` ranks; return results by rank.

    Each rank is a fresh Python process (`dpsim.runtime.launch.start`: forked from a fork
    server that imported torch, or spawned) in which the default process group is
    initialised when `fn` starts (`backend`: "gloo", "nccl", or "auto" = nccl when there is
    one GPU per rank, else gloo; with nccl, rank r uses cuda:r) and destroyed after `fn`
    returns. `device`: where `fn` keeps its tensors: "cpu" makes "auto" gloo even where
    there are GPUs (NCCL serves CUDA tensors only); "auto" when `fn` follows the group
    (cuda:<rank> when `dist.get_backend() == "nccl"`, else the CPU). The rule is
    `backend.choose_backend`. `fn`, `args`, `kwargs` and the return values travel with dill.

    `world_size`: 1..64 ranks. `timeout_s`: seconds (> 0, may be inf) for the whole
    launch, start-up (forked: about 0.1 s for 2 ranks, after the fork server's first
    start of about 2 s; spawned: about 1.5 s per rank-core, each rank imports torch)
    included. `master_addr`: address of this machine the rendezvous binds to (loopback
    by default). `env`: extra environment variables for the ranks (set before torch is
    imported there: such a launch is spawned). Unless OMP_NUM_THREADS is set, each rank
    uses usable-CPUs // world_size intra-op threads. Prints of the ranks go to this
    process's stdout/stderr (so to the notebook). Ranks end with os._exit after atexit
    handlers: files they write should be closed in `fn`.

    Raises `RankFailedError` when a rank raises or dies, `LaunchTimeoutError` when ranks do
    not finish in time, `ValueError` for bad arguments. All rank processes are gone when
    this returns or raises.
    """
    world_size = require_int("world_size", world_size, 1, MAX_WORLD_SIZE)
    require_choice("backend", backend, BACKENDS)
    timeout_s = float(require_range("timeout_s", timeout_s, 0, None, low_inclusive=False))
    _check_call(fn, args, kwargs, master_addr)
    user_env = _check_env(env)
    payload = _ship(fn, args, kwargs)
    resolved = choose_backend(backend, world_size, device=device)
    sources = interactive_sources()
    base_env = _network_env(master_addr, resolved)
    base_env.update(user_env)
    method = start_method(user_env)
    num_threads = None
    if "OMP_NUM_THREADS" not in base_env and "OMP_NUM_THREADS" not in os.environ:
        num_threads = max(1, _usable_cpus() // world_size)
    elif method == "forkserver":  # torch loaded in the server, before this variable is set
        num_threads = _omp_threads(os.environ["OMP_NUM_THREADS"])
    if method == "forkserver":  # the fork server's environment is frozen when it starts
        base_env = {**os.environ, **base_env}
    ctx = start_context(method)
    skip_main_reimport()
    job = _Job(
        ctx=ctx, payload=payload, world_size=world_size, backend=resolved,
        master_addr=master_addr, timeout_s=timeout_s, env=base_env, num_threads=num_threads,
        sources=sources,
    )
    return _run_with_retries(job, time.monotonic() + timeout_s)


def _check_call(fn: Callable[..., Any], args: Any, kwargs: Any, master_addr: Any) -> None:
    """ValueError unless fn is callable, args a tuple, kwargs a dict, master_addr a host."""
    if not callable(fn):
        raise ValueError(f"fn={fn!r} is not callable; give a function fn(rank, world_size, ...)")
    if not isinstance(args, (tuple, list)):
        raise ValueError(f"args={args!r} is not allowed; give a tuple")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"kwargs={kwargs!r} is not allowed; give a dict (or None)")
    if not isinstance(master_addr, str) or not master_addr:
        raise ValueError(f"master_addr={master_addr!r} is not allowed; give a host name or IP")


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of `env` (None -> {}); ValueError unless it maps str to str."""
    if env is None:
        return {}
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ValueError(f"env={env!r} is not allowed; give a dict of str -> str (or None)")
    return dict(env)


def _ship(fn: Callable[..., Any], args: Any, kwargs: Mapping[str, Any] | None) -> bytes:
    """dill bytes of (fn, args, kwargs) for the ranks; ValueError naming what fails if not."""
    args, kwargs = tuple(args), dict(kwargs or {})
    try:
        payload = dumps((fn, args, kwargs))
    except Exception as exc:
        parts = describe_unpicklable(fn, args, kwargs) or "(no single part found; fn as a whole)"
        raise ValueError(
            f"fn, args or kwargs cannot be pickled with dill to ship them to the ranks "
            f"({type(exc).__name__}: {exc}). What cannot be pickled: {parts}. {_PICKLE_FIX}"
        ) from exc
    return payload


def _network_env(master_addr: str, backend: str) -> dict[str, str]:
    """Pin gloo (and nccl) to the loopback interface when the rendezvous is on loopback."""
    env: dict[str, str] = {}
    if is_loopback(master_addr):
        ifname = loopback_ifname()
        if ifname is not None:
            env["GLOO_SOCKET_IFNAME"] = ifname
            if backend == "nccl":
                env["NCCL_SOCKET_IFNAME"] = ifname
    return env


def _omp_threads(value: str) -> int | None:
    """OMP_NUM_THREADS as a thread count, None when it is not a positive integer."""
    return int(value) if value.strip().isdigit() and int(value) > 0 else None


def _usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- join retries


def _run_with_retries(job: _Job, deadline: float) -> list[Any]:
    """`job.run(deadline)`, started again (same deadline) after a transient join failure."""
    for attempt in range(1, _JOIN_ATTEMPTS + 1):
        try:
            return job.run(deadline)
        except RankFailedError as err:
            if attempt == _JOIN_ATTEMPTS or not _is_transient_join_failure(err):
                raise
            print(
                f"dpsim.launch: rank {err.rank} could not join the process group "
                f"({err.summary.splitlines()[0][:160]}); no rank had started fn, starting "
                f"all {job.world_size} ranks again (attempt {attempt + 1} of {_JOIN_ATTEMPTS})",
                file=sys.stderr, flush=True,
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _is_transient_join_failure(err: RankFailedError) -> bool:
    """True for a flaky gloo/NCCL connection error while ranks were joining the group.

    Gloo's full-mesh connect occasionally fails on a loaded machine ("Connection closed by
    peer"). Ranks only start fn after all joined, so starting the group again is safe.
    """
    return err.phase == "init" and any(text in err.summary for text in _TRANSIENT_JOIN_ERRORS)


# --------------------------------------------------------------------------- one attempt


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
        store, store_host, store_port = start_store(self.master_addr, self.world_size,
                                                    self.timeout_s)
        store_prefix = f"dpsim-{secrets.token_hex(8)}/"
        procs: list[Any] = []
        conns: list[Any] = []
        dump_conns: list[Any] = []
        tails: list[StderrTail] = []
        started = time.monotonic()
        try:
            for rank in range(self.world_size):
                spec = self._spec(rank, store_host, store_port, store_prefix)
                self._start_rank(spec, procs, conns, dump_conns, tails)
            return self._results(procs, conns, dump_conns, deadline, (store, store_prefix),
                                 tails, started)
        finally:
            stop(procs)
            for tail in tails:
                tail.close()
            for conn in conns + dump_conns:
                with contextlib.suppress(OSError):
                    conn.close()
            for p in procs:
                with contextlib.suppress(ValueError, AttributeError):
                    p.close()
            del store

    def _spec(self, rank: int, store_host: str, store_port: int, store_prefix: str
              ) -> RankSpec:
        """What rank `rank` needs, its torchrun-style environment variables included."""
        forked = self.ctx.get_start_method() == "forkserver"
        rank_env = dict(self.env)
        rank_env.update(
            MASTER_ADDR=store_host, MASTER_PORT=str(store_port), RANK=str(rank),
            LOCAL_RANK=str(rank), WORLD_SIZE=str(self.world_size),
            LOCAL_WORLD_SIZE=str(self.world_size),
        )
        return RankSpec(
            rank=rank, world_size=self.world_size, backend=self.backend,
            store_host=store_host, store_port=store_port, timeout_s=self.timeout_s,
            parent_pid=os.getpid(), payload=self.payload, store_prefix=store_prefix,
            env=rank_env, num_threads=self.num_threads, sources=self.sources,
            forked=forked, stdio=launcher_stdio() if forked else (),
        )

    def _start_rank(self, spec: RankSpec, procs: list[Any], conns: list[Any],
                    dump_conns: list[Any], tails: list[StderrTail]) -> None:
        """Start one rank process; append it and its read ends of the pipes to the lists
        (its stderr's: a `StderrTail`)."""
        result_r, result_w = self.ctx.Pipe(duplex=False)
        dump_r, dump_w = self.ctx.Pipe(duplex=False)
        err_r, err_w = os.pipe()
        conns.append(result_r)
        dump_conns.append(dump_r)
        tails.append(StderrTail(err_r))
        spec = replace(spec, stderr_fd=InheritedFd(err_w))
        proc = self.ctx.Process(target=rank_main, args=(spec, result_w, dump_w),
                                name=f"{RANK_NAME_PREFIX}{spec.rank}", daemon=False)
        procs.append(proc)
        try:
            proc.start()
        finally:
            result_w.close()
            dump_w.close()
            os.close(err_w)
        with _pids_lock:
            _last_pids[:] = [p.pid for p in procs if p.pid is not None]

    def _results(self, procs: list[Any], conns: list[Any], dump_conns: list[Any],
                 deadline: float, store: tuple[Any, str], tails: list[StderrTail],
                 started: float) -> list[Any]:
        """Collect the started ranks; return their results or raise the launch's error.

        `store`: the rendezvous store and this launch's key prefix in it.
        """
        pids = [p.pid for p in procs]
        watch = Watch(pids, self.world_size,
                      read_stacks=lambda ranks: read_stacks(procs, dump_conns, ranks),
                      all_joined=lambda: joined_ranks(*store, self.world_size) == set(
                          range(self.world_size)))
        results, failures, waits = collect(procs, conns, deadline, watch.check)
        if waits is not None:
            stop(procs)
            stacks = {r: text for r, dump in watch.dumps.items() if (text := trim_stack(dump))}
            raise DeadlockError(sorted(waits), self.timeout_s, time.monotonic() - started,
                                finished=sorted(results), stacks=stacks,
                                states=describe(waits, sorted(results)), pids=pids)
        if failures:
            failures.sort(key=lambda f: not f.died)  # a dead process is the likely cause
            for failure in failures:
                words = last_words(tails[failure.rank].text(wait_s=0.5)) if failure.died else ""
                if words:
                    failure.summary += ("; the last it wrote on stderr:\n"
                                        + "\n".join(f"    {line}" for line in words.splitlines()))
            first, others = failures[0], failures[1:]
            stop(procs)
            raise RankFailedError(
                first.rank, first.summary, first.traceback, exitcode=first.exitcode,
                exc_type=first.exc_type, phase=first.phase,
                other_failures=[f"rank {f.rank}: {f.summary}" for f in others], pids=pids,
            )
        stuck = [rank for rank in range(self.world_size) if rank not in results]
        if stuck:
            dumps = read_stacks(procs, dump_conns, stuck)
            joined = joined_ranks(*store, self.world_size)
            stop(procs)
            states = {r: rank_state(r, dumps.get(r), joined, self.world_size) for r in stuck}
            stacks = {r: text for r, dump in dumps.items() if (text := trim_stack(dump))}
            raise LaunchTimeoutError(stuck, self.timeout_s, finished=sorted(results),
                                     stacks=stacks, states=states, pids=pids)
        exit_deadline = time.monotonic() + _EXIT_GRACE_S
        for p in procs:
            p.join(max(0.0, exit_deadline - time.monotonic()))
        return [results[rank] for rank in range(self.world_size)]
