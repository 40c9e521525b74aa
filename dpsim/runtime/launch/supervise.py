"""Watching rank processes from the launcher: results, failures, stacks, and stopping them."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpsim.runtime.launch.errors import describe_exit
from dpsim.runtime.launch.rank import RANK_FRAMES

_TERMINATE_GRACE_S = 1.0  # SIGTERM -> SIGKILL, seconds
_FAILURE_WINDOW_S = 0.25  # after a first failure, how long to collect others, seconds
_STACK_DUMP_WAIT_S = 1.0  # on timeout, how long to wait for the stuck ranks' stacks, seconds
_POLL_S = 0.5  # the launcher's longest wait between checks of the ranks, seconds


@dataclass
class _Failure:
    """One rank's failure as the launcher saw it (its message, or its death)."""

    rank: int
    summary: str
    traceback: str = ""
    exitcode: int | None = None
    exc_type: str | None = None
    phase: str | None = None  # "start", "init", "fn", "result"; None if it died

    @property
    def died(self) -> bool:
        """True when the process died without sending a message."""
        return self.exc_type is None


def stop(procs: Sequence[Any], grace_s: float = _TERMINATE_GRACE_S) -> None:
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


# --------------------------------------------------------------------------- stacks


def read_stacks(procs: Sequence[Any], dump_conns: Sequence[Any], ranks: Sequence[int]
                ) -> dict[int, str]:
    """Ask stuck ranks for their Python stacks (SIGUSR1 -> faulthandler); the dumps' text."""
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
    chunks = _read_dumps(dump_conns, asked)
    return {rank: data.decode(errors="replace") for rank, data in chunks.items() if data}


def _read_dumps(dump_conns: Sequence[Any], asked: Sequence[int]) -> dict[int, bytes]:
    """Bytes faulthandler wrote for each rank in `asked`, until all wrote and went quiet."""
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
    return chunks


def trim_stack(dump: str) -> str | None:
    """A faulthandler dump without the frames of the launcher and multiprocess below fn.

    None when no line is left.
    """
    lines = dump.splitlines()
    # Most recent call first: cut at the first frame of the rank's own code.
    suffixes = tuple(f" in {name}" for name in RANK_FRAMES)
    cut = next((i for i, line in enumerate(lines) if line.endswith(suffixes)), None)
    if cut is not None:
        lines = lines[:cut]
    return "\n".join(lines) if lines else None


# --------------------------------------------------------------------------- results


@dataclass
class _Collector:
    """The results and failures received so far from one launch's ranks."""

    procs: Sequence[Any]
    conns: Sequence[Any]
    results: dict[int, Any] = field(default_factory=dict)
    failures: list[_Failure] = field(default_factory=list)

    def handled(self) -> set[int]:
        """Ranks that sent a result or failed."""
        return set(self.results) | {f.rank for f in self.failures}

    def died(self, rank: int) -> None:
        """Record that `rank`'s process ended without a message."""
        proc = self.procs[rank]
        proc.join(1.0)
        self.failures.append(_Failure(rank, describe_exit(proc.exitcode),
                                      exitcode=proc.exitcode))

    def receive(self, rank: int) -> None:
        """Read `rank`'s message (a result or an error) from its pipe."""
        import dill

        try:
            raw = self.conns[rank].recv_bytes()
        except (EOFError, OSError):
            self.died(rank)
            return
        message = pickle.loads(raw)
        if message[0] == "ok":
            try:
                self.results[rank] = dill.loads(message[1])
            except Exception as exc:
                self.failures.append(_Failure(
                    rank, f"its return value could not be unpickled in the launching process: "
                    f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                    exc_type=type(exc).__name__))
        else:
            _, summary, tb_text, exc_type, phase = message
            self.failures.append(_Failure(rank, summary, tb_text, exc_type=exc_type,
                                          phase=phase))

    def wait(self, pending: Sequence[int], timeout_s: float) -> None:
        """Wait up to `timeout_s` seconds for messages or deaths of `pending` ranks."""
        from multiprocess.connection import wait

        owners: dict[Any, tuple[str, int]] = {}
        for rank in pending:
            owners[self.conns[rank]] = ("conn", rank)
            owners[self.procs[rank].sentinel] = ("exit", rank)
        ready = wait(list(owners), timeout=timeout_s)
        # Messages first: a rank that sent its result and exited is a success.
        for obj in ready:
            kind, rank = owners[obj]
            if kind == "conn":
                self.receive(rank)
        handled = self.handled()
        exited = {owners[obj][1] for obj in ready if owners[obj][0] == "exit"}
        # A dead rank whose forked children (DataLoader workers) still hold its sentinel and
        # pipe does not make them ready: also ask the OS (waitpid) which ranks have exited.
        exited |= {rank for rank in pending if self.procs[rank].exitcode is not None}
        for rank in sorted(exited):
            if rank not in handled:
                if self.conns[rank].poll(0):  # a rank's messages are all in the pipe once it exited
                    self.receive(rank)
                else:
                    self.died(rank)
                handled.add(rank)


def collect(
    procs: Sequence[Any], conns: Sequence[Any], deadline: float,
    watch: Callable[[list[int]], Any] | None = None,
) -> tuple[dict[int, Any], list[_Failure], Any]:
    """Wait for every rank's message or death until `deadline` (time.monotonic seconds).

    After a first failure, other failures are collected for `_FAILURE_WINDOW_S` more.
    `watch(pending)` is asked between waits while no rank failed; what it returns first
    that is not None stops the wait and is returned third (a deadlock), else None.
    """
    collector = _Collector(procs, conns)
    first_failure_at: float | None = None
    while True:
        done = collector.handled()
        pending = [rank for rank in range(len(procs)) if rank not in done]
        now = time.monotonic()
        if collector.failures and first_failure_at is None:
            first_failure_at = now
        if not pending or now >= deadline:
            break
        limit = deadline - now
        if first_failure_at is not None:
            limit = min(limit, first_failure_at + _FAILURE_WINDOW_S - now)
            if limit <= 0:
                break
        collector.wait(pending, min(limit, _POLL_S))
        if watch is not None and not collector.failures:
            still = [rank for rank in pending if rank not in collector.handled()]
            found = watch(still)
            if found is not None:
                return collector.results, collector.failures, found
    return collector.results, collector.failures, None
