"""The GIL measured on this machine: threads against processes, and who runs Python when.

Workloads (each worker does the same amount, so speed-up = k * t(1) / t(k)):

* "python"  a pure-Python loop: holds the GIL the whole time;
* "matmul"  torch matrix products (one intra-op thread): torch releases the GIL inside;
* "rnn"     forward + backward of a small RNN stepped in a Python loop: many tiny operators,
            so the Python overhead around each dominates;
* "mixed"   a Python loop then a hash of a large buffer (hashlib releases the GIL), in
            a chosen proportion: the GIL share is known and the model can be checked.

Processes are forked on Linux (spawned elsewhere) and timed from a common barrier, so
start-up cost is not counted. Keep runs short: results on a shared machine are noisy.
"""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dpsim.sim import Event, Trace, require_choice, require_int, require_range

WORKLOADS = ("python", "matmul", "rnn", "mixed")
KINDS = ("threads", "processes")
_HASH_BYTES = 1 << 16  # hashlib releases the GIL for buffers of 2 KiB and more


def gil_status() -> dict[str, Any]:
    """Is this a free-threaded build, and is the GIL on right now? (sys._is_gil_enabled)."""
    check = getattr(sys, "_is_gil_enabled", None)
    return {
        "python": sys.version.split()[0],
        "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": True if check is None else bool(check()),
        "switch_interval_s": sys.getswitchinterval(),
        "cpu_cores": os.cpu_count() or 1,
    }


# --- the work ---------------------------------------------------------------------------


def python_loop(n_iters: int) -> int:
    """Pure-Python CPU work (holds the GIL throughout)."""
    total = 0
    for i in range(n_iters):
        total += i * i % 7
    return total


def _hash(n_blocks: int, buf: bytes) -> None:
    for _ in range(n_blocks):
        hashlib.sha256(buf).digest()


class _Work:
    """One repetition of a workload, built once per process."""

    def __init__(self, name: str, mixed: tuple[int, int] = (2000, 4)) -> None:
        self.name = name
        self.mixed = mixed  # (python iterations, hashed 64 KiB blocks) per repetition
        self.buf = b"\x01" * _HASH_BYTES
        if name in ("matmul", "rnn"):
            import torch

            from dpsim.runtime.models import TinyRNN

            torch.set_num_threads(1)
            g = torch.Generator().manual_seed(0)
            self.a = torch.randn(160, 160, generator=g)
            self.rnn = TinyRNN(8, 16, 2)
            self.x = torch.randn(8, 12, 8, generator=g)

    def __call__(self, log: list[tuple[str, float, float]] | None = None) -> None:
        if self.name == "python":
            python_loop(3000)
        elif self.name == "matmul":
            self.a @ self.a
        elif self.name == "rnn":
            self.rnn(self.x).sum().backward()
        else:
            t0 = time.perf_counter()
            python_loop(self.mixed[0])
            t1 = time.perf_counter()
            _hash(self.mixed[1], self.buf)
            if log is not None:
                log.append(("python", t0, t1))
                log.append(("native", t1, time.perf_counter()))


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Use n intra-op threads inside the block (restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _repeats_for(work: _Work, work_s: float) -> int:
    """Repetitions of `work` that take about work_s seconds alone (measured)."""
    work()
    n, elapsed = 1, 0.0
    while elapsed < 0.02:
        n *= 2
        t0 = time.perf_counter()
        for _ in range(n):
            work()
        elapsed = time.perf_counter() - t0
    return max(1, round(n * work_s / elapsed))


# --- runs -------------------------------------------------------------------------------


@dataclass
class ScalingResult:
    """Measured seconds for k workers that each do the same work, for each k."""

    workload: str
    kind: str  # "threads" or "processes"
    counts: list[int]
    times_s: list[float]  # wall time from the common start until the last worker ends
    repeats: int  # repetitions of the workload per worker
    traces: dict[int, Trace] = field(default_factory=dict)  # per count: one row per worker

    @property
    def speedups(self) -> list[float]:
        """k * t(1) / t(k): how much more work per second k workers do than one."""
        base = self.times_s[0] / self.counts[0]
        return [k * base / t for k, t in zip(self.counts, self.times_s, strict=True)]

    def rows(self) -> list[dict[str, Any]]:
        """One row per worker count, for printing."""
        return [{"workload": self.workload, "kind": self.kind, "workers": k,
                 "time_ms": round(t * 1e3, 1), "speedup": round(s, 2)}
                for k, t, s in zip(self.counts, self.times_s, self.speedups, strict=True)]


def _thread_run(work: _Work, repeats: int, k: int) -> list[tuple[float, float, list[Any]]]:
    barrier = threading.Barrier(k)
    out: list[tuple[float, float, list[Any]]] = [(0.0, 0.0, [])] * k

    def worker(i: int) -> None:
        log: list[Any] = []
        if work.name in ("matmul", "rnn"):
            import torch

            torch.set_num_threads(1)  # per thread: MKL would otherwise use every core here
        work()  # first use in a new thread (autograd, allocator) is not timed
        barrier.wait()
        t0 = time.perf_counter()
        for _ in range(repeats):
            work(log)
        out[i] = (t0, time.perf_counter(), log)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(k)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def _process_worker(name: str, mixed: tuple[int, int], repeats: int, barrier: Any,
                    queue: Any, index: int) -> None:
    """Entry point of a measuring process: build the work, wait for all, time it."""
    work = _Work(name, mixed)
    work()
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(repeats):
        work()
    queue.put((index, t0, time.perf_counter()))


def _process_run(name: str, mixed: tuple[int, int], repeats: int,
                 k: int) -> list[tuple[float, float, list[Any]]]:
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    ctx: Any = multiprocessing.get_context(method)
    barrier, queue = ctx.Barrier(k), ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(name, mixed, repeats, barrier, queue, i),
                         daemon=True) for i in range(k)]
    for p in procs:
        p.start()
    try:
        got = [queue.get(timeout=120) for _ in range(k)]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    out: list[tuple[float, float, list[Any]]] = [(0.0, 0.0, [])] * k
    for i, t0, t1 in got:
        out[i] = (t0, t1, [])
    return out


def measure_scaling(workload: str = "python", counts: Sequence[int] = (1, 2, 4),
                    kind: str = "threads", work_s: float = 0.05, trials: int = 2,
                    mixed: tuple[int, int] = (2000, 4)) -> ScalingResult:
    """Time k workers (threads or processes) that each do work_s seconds of `workload`.

    Each count is run `trials` times and the fastest kept (the least disturbed by other
    programs on the machine).
    """
    require_choice("workload", workload, WORKLOADS)
    require_choice("kind", kind, KINDS)
    require_range("work_s", work_s, 0, 10, low_inclusive=False)
    require_int("trials", trials, 1, 20)
    if not counts or counts[0] != 1:
        raise ValueError(f"counts={tuple(counts)!r} must start with 1 (the baseline); "
                         "give worker counts such as (1, 2, 4)")
    for k in counts:
        require_int("n_threads" if kind == "threads" else "n_processes", k, 1, 64)
    with _torch_threads(1):
        work = _Work(workload, mixed)
        repeats = _repeats_for(work, work_s)
        result = ScalingResult(workload, kind, list(counts), [], repeats)
        for k in counts:
            best: tuple[float, Trace] | None = None
            for _ in range(trials):
                runs = (_thread_run(work, repeats, k) if kind == "threads"
                        else _process_run(workload, mixed, repeats, k))
                start = min(r[0] for r in runs)
                took = max(r[1] for r in runs) - start
                if best is None or took < best[0]:
                    best = (took, _runs_trace(runs, start, workload, kind))
            assert best is not None
            result.times_s.append(best[0])
            result.traces[k] = best[1]
    return result


def _runs_trace(runs: list[tuple[float, float, list[Any]]], start: float, workload: str,
                kind: str) -> Trace:
    tr = Trace("measured", meta={"workload": workload, "kind": kind})
    for i, (t0, t1, log) in enumerate(runs):
        tr.add(Event(i, "worker", "work", t0 - start, t1 - start, label=f"{kind[:-1]} {i}"))
        for what, a, b in log:
            tr.add(Event(i, what, what, a - start, b - start))
    return tr


# --- who holds the GIL when -------------------------------------------------------------


def python_timeline(n_threads: int = 2, duration_s: float = 0.04,
                    switch_interval_s: float | None = None, block_iters: int = 200) -> Trace:
    """Per thread, the intervals in which it ran Python (measured, pure-Python threads).

    Each thread runs short blocks of Python and stamps the clock after each; a gap longer
    than a few blocks means another thread had the GIL. meta["turn_s"] is the median
    length of a turn; `switch_interval_s` sets sys.setswitchinterval for the run.
    """
    require_int("n_threads", n_threads, 1, 16)
    require_range("duration_s", duration_s, 0, 5, low_inclusive=False)
    old = sys.getswitchinterval()
    if switch_interval_s is not None:
        require_range("switch_interval_s", switch_interval_s, 0, 1, low_inclusive=False)
        sys.setswitchinterval(switch_interval_s)
    stamps: list[list[float]] = [[] for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads)

    def worker(i: int) -> None:
        barrier.wait()
        own = stamps[i]
        now = time.perf_counter
        end = now() + duration_s
        own.append(now())
        while own[-1] < end:
            python_loop(block_iters)
            own.append(now())

    try:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    return _turns_trace(stamps, switch_interval_s or old)


def _turns_trace(stamps: list[list[float]], switch_interval_s: float) -> Trace:
    start = min(s[0] for s in stamps if s)
    steps = sorted(b - a for s in stamps for a, b in itertools.pairwise(s))
    block = steps[len(steps) // 4] if steps else 0.0  # a typical uninterrupted block
    tr = Trace("measured", meta={"switch_interval_s": switch_interval_s, "block_s": block})
    turns: list[float] = []
    for i, s in enumerate(stamps):
        if not s:
            continue
        a = prev = s[0]
        for t in s[1:]:
            if t - prev > 4 * block:  # this thread was waiting for the GIL in between
                tr.add(Event(i, "python", "python", a - start, prev - start, label="turn"))
                turns.append(prev - a)
                tr.add(Event(i, "waiting", "gil_wait", prev - start, t - start))
                a = t
            prev = t
        tr.add(Event(i, "python", "python", a - start, prev - start, label="turn"))
    inner = sorted(turns)
    tr.meta["turn_s"] = inner[len(inner) // 2] if inner else tr.end_s
    tr.meta["n_turns"] = len(tr.filter(kind="python"))
    return tr


def measure_mixed(counts: Sequence[int] = (1, 2, 4), gil_share: float = 0.3,
                  work_s: float = 0.05, trials: int = 2) -> dict[str, Any]:
    """Threads running the "mixed" workload: measured GIL share and speed-ups.

    The Python and hash parts of one repetition are sized for about `gil_share`; the
    share actually measured alone (time in Python / total) is returned with the speed-ups
    (compare them with dpsim.sim.cost.gil.predict_speedup and dpsim.sim.cost.gil.simulate).
    """
    require_range("gil_share", gil_share, 0.01, 0.99)
    per_py = _time_per(lambda: python_loop(1000)) / 1000
    per_hash = _time_per(lambda: _hash(1, b"\x01" * _HASH_BYTES))
    n_hash = 2
    n_py = max(1, round(gil_share / (1 - gil_share) * n_hash * per_hash / per_py))
    res = measure_scaling("mixed", counts, "threads", work_s, trials, mixed=(n_py, n_hash))
    alone = res.traces[counts[0]]
    py = sum(e.duration_s for e in alone.filter(kind="python"))
    native = sum(e.duration_s for e in alone.filter(kind="native"))
    return {"result": res, "measured_gil_share": py / (py + native) if py + native else 0.0,
            "python_iters": n_py, "hash_blocks": n_hash}


def _time_per(fn: Callable[[], object], repeats: int = 20) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats
