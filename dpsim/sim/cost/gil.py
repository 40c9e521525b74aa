"""A model of CPython's global interpreter lock (GIL): threads take turns running Python.

Each thread runs a list of segments of CPU work: ("gil", s) runs Python bytecode and must
hold the GIL; ("free", s) runs C code that released it (a torch matmul, hashing, I/O).
The rules, as in CPython 3.2+:

* one thread holds the GIL at a time; a thread that wants it waits in line (first come,
  first served here; the operating system decides in reality);
* a holder gives it up when its segment ends (entering GIL-free C code), or is forced to
  after `switch_interval_s` (`sys.getswitchinterval()`, 5 ms by default) once another
  thread has been waiting; the forced thread joins the back of the line;
* everything that runs (the holder and every GIL-free segment) shares `n_cores` cores
  equally (processor sharing); `n_cores=None` gives every thread its own core.

The closed form: N threads that each do W seconds of work, a share g of it under the
GIL, on C cores, cannot finish before max(W, N*g*W, N*W/C), so the speed-up over running
them one after another is at most min(N, 1/g, C). `simulate` reaches it when the work
alternates finely between Python and C; the tests check the limits (g = 0 -> N, g = 1 -> 1).
Deterministic: no clock is read.

The model's domain: up to 1024 threads on up to 4096 cores; a thread's work and every
segment at most an hour of CPU time; a switch interval of at least 1 us (CPython keeps it
in whole microseconds). A simulation takes one step per segment end or forced hand-over,
each costing time in proportion to the threads, so `schedule` and `simulate` refuse runs
whose estimated steps x (threads + 10) exceed MAX_STEPS (under half a second).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import Int, Real, check_fields
from dpsim.sim.cost.gil_domain import SEGMENT_KINDS as SEGMENT_KINDS
from dpsim.sim.cost.gil_domain import Segment as Segment
from dpsim.sim.cost.gil_domain import check_steps, check_threads
from dpsim.sim.cost.gil_domain import simulation_steps as simulation_steps
from dpsim.sim.limits import MAX_CORES as MAX_CORES
from dpsim.sim.limits import MAX_CPU_S
from dpsim.sim.limits import MAX_THREADS as MAX_THREADS
from dpsim.sim.limits import MIN_SWITCH_INTERVAL_S as MIN_SWITCH_INTERVAL_S
from dpsim.sim.trace import Event, Trace

DEFAULT_SWITCH_INTERVAL_S = 0.005  # CPython's default sys.getswitchinterval()
_EPS = 1e-12

Threads = Annotated[int, Int(1, MAX_THREADS)]
Cores = Annotated[int, Int(1, MAX_CORES)]
Share = Annotated[float, Real(0, 1)]  # of a thread's work, under the GIL
Interval = Annotated[float, Real(MIN_SWITCH_INTERVAL_S)]  # seconds, whole microseconds
WorkSeconds = Annotated[float, Real(0, MAX_CPU_S, low_inclusive=False)]  # CPU seconds, > 0
Ops = Annotated[int, Int(1, 1_000_000)]


@dataclass(frozen=True)
class GILConfig:
    """N identical threads whose work alternates between Python (GIL) and C (no GIL)."""

    n_threads: Threads = 2  # threads started together
    work_s: WorkSeconds = 0.1  # CPU seconds of work per thread when it runs alone
    gil_share: Share = 1.0  # share of that work that holds the GIL (1: pure Python)
    n_ops: Ops = 50  # the work alternates Python / C this many times
    switch_interval_s: Interval = DEFAULT_SWITCH_INTERVAL_S  # forced hand-over after this wait
    n_cores: Cores | None = None  # cores shared by all threads; None: one per thread

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class GILResult:
    """A simulated run of threads under the GIL, and the closed form next to it."""

    trace: Trace  # device = thread; streams "python" (holds the GIL), "native", "waiting"
    makespan_s: float  # from the start until the last thread finishes
    serial_s: float  # the same work run one thread after another
    speedup: float  # serial_s / makespan_s
    predicted_speedup: float  # closed form min(N, 1/g, C)
    gil_busy_fraction: float  # share of the makespan in which some thread held the GIL


def predict_speedup(gil_share: Share, n_threads: Threads, n_cores: Cores | None = None
                    ) -> float:
    """Upper bound on the threaded speed-up: min(n_threads, 1 / gil_share, n_cores)."""
    bound = float(n_threads)
    if gil_share > 0:
        bound = min(bound, 1.0 / gil_share)
    if n_cores is not None:
        bound = min(bound, float(n_cores))
    return max(bound, 1.0)


def thread_segments(config: GILConfig) -> list[Segment]:
    """One thread's work: n_ops times (Python for g*w, then C for (1-g)*w), w = work/n_ops."""
    gil, free = _op_seconds(config)
    one_op: list[Segment] = [seg for seg in (("gil", gil), ("free", free)) if seg[1] > 0]
    return one_op * config.n_ops


def _op_seconds(config: GILConfig) -> tuple[float, float]:
    """(Python seconds, C seconds) of one op: g*w and (1-g)*w, w = work_s / n_ops."""
    per_op = config.work_s / config.n_ops
    return config.gil_share * per_op, (1.0 - config.gil_share) * per_op


def _config_cost(config: GILConfig) -> float:
    """Refuse a GILConfig too long to simulate, naming what drives the cost; return the
    cost."""
    gil, free = _op_seconds(config)
    n = config.n_threads
    per_thread = config.n_ops * ((gil > 0) + (free > 0))
    gil_s = n * config.n_ops * gil
    _, handovers = simulation_steps(n, n * per_thread, gil_s, config.switch_interval_s,
                                    config.n_cores)
    named = (f"switch_interval_s={config.switch_interval_s!r}" if handovers > n * per_thread
             else f"n_threads={n!r}" if n > config.n_ops else f"n_ops={config.n_ops!r}")
    return check_steps(named, n, n * per_thread, gil_s, config.switch_interval_s,
                        config.n_cores)


@dataclass
class _Thread:
    segments: list[Segment]
    original: list[int]  # index of each kept segment in the caller's list
    ends_s: list[float]  # end time of every segment of the caller's list
    index: int = 0  # current segment
    remaining_s: float = 0.0  # CPU seconds left in the current segment
    state: str = "done"  # "want", "hold", "free", "done"
    since_s: float = 0.0  # when the current state began


def schedule(threads: Sequence[Sequence[Segment]],
             switch_interval_s: Interval = DEFAULT_SWITCH_INTERVAL_S,
             n_cores: Cores | None = None) -> Trace:
    """Run the segments of every thread under one GIL; return the timeline as a Trace.

    Events: stream "python" kind "python" while a thread holds the GIL, stream "native"
    kind "native" while it runs GIL-free code, stream "waiting" kind "gil_wait" while it
    waits for the GIL. Thread i is device i. Times in seconds from the start.
    meta["segment_end_s"][i][k] is when segment k of thread i finished.
    """
    n_kept, gil_s = check_threads(threads)
    _, handovers = simulation_steps(len(threads), n_kept, gil_s, switch_interval_s, n_cores)
    named = (f"switch_interval_s={switch_interval_s!r}" if handovers > n_kept else
             f"threads=<{len(threads)} threads, {n_kept:,} segments longer than 0 s>")
    check_steps(named, len(threads), n_kept, gil_s, switch_interval_s, n_cores)
    return _schedule(threads, switch_interval_s, n_cores)


def _schedule(threads: Sequence[Sequence[Segment]], switch_interval_s: float,
              n_cores: int | None) -> Trace:
    """`schedule` on checked threads whose simulation cost is within MAX_STEPS."""
    state = []
    for segs in threads:
        kept = [k for k, s in enumerate(segs) if s[1] > 0]
        state.append(_Thread([segs[k] for k in kept], kept, [0.0] * len(segs)))
    trace = Trace("simulated", meta={"model": "gil", "switch_interval_s": switch_interval_s,
                                     "n_cores": n_cores})
    t = 0.0
    owner: int | None = None
    owner_since = 0.0
    for th in state:
        _enter(th, 0, t)

    def close(i: int, th: _Thread, end_s: float) -> None:
        stream, kind = ("python", "python") if th.state == "hold" else ("native", "native")
        if end_s > th.since_s:
            trace.add(Event(i, stream, kind, th.since_s, end_s))

    while True:
        waiting = [i for i, th in enumerate(state) if th.state == "want"]
        if owner is None and waiting:
            owner = min(waiting, key=lambda i: (state[i].since_s, i))
            th = state[owner]
            if t > th.since_s:
                trace.add(Event(owner, "waiting", "gil_wait", th.since_s, t))
            th.state, th.since_s, owner_since = "hold", t, t
            waiting.remove(owner)
        running = [i for i, th in enumerate(state) if th.state in ("hold", "free")]
        if not running:
            break
        rate = 1.0 if n_cores is None else min(1.0, n_cores / len(running))
        dt = min(state[i].remaining_s / rate for i in running)
        forced_at = math.inf
        if owner is not None and waiting:
            first_wait = min(state[i].since_s for i in waiting)
            forced_at = max(owner_since, first_wait) + switch_interval_s
            dt = min(dt, max(forced_at - t, 0.0))
        t += dt
        for i in running:
            state[i].remaining_s -= dt * rate
        for i in running:
            th = state[i]
            if th.remaining_s > _EPS * max(1.0, t):
                continue
            th.ends_s[th.original[th.index]] = t
            was_owner = i == owner
            nxt = th.index + 1
            if was_owner and nxt < len(th.segments) and th.segments[nxt][0] == "gil":
                th.index, th.remaining_s = nxt, th.segments[nxt][1]  # keeps holding the GIL
                continue
            close(i, th, t)
            _enter(th, nxt, t)
            if was_owner:
                owner = None
        if owner is not None and t >= forced_at - _EPS * max(1.0, t) \
                and state[owner].state == "hold":
            th = state[owner]
            close(owner, th, t)
            th.state, th.since_s = "want", t
            owner = None
    trace.meta["segment_end_s"] = [_fill_ends(th) for th in state]
    return trace


def _fill_ends(th: _Thread) -> list[float]:
    """End times of every segment; an empty segment ends when the one before it did."""
    ends = list(th.ends_s)
    kept = set(th.original)
    for k in range(len(ends)):
        if k not in kept:
            ends[k] = ends[k - 1] if k else 0.0
    return ends


def _enter(th: _Thread, index: int, t: float) -> str:
    """Start segment `index` of `th` at time t; return its new state."""
    th.index = index
    if index >= len(th.segments):
        th.state = "done"
        return th.state
    kind, seconds = th.segments[index]
    th.remaining_s = seconds
    th.state = "free" if kind == "free" else "want"
    th.since_s = t
    return th.state


def simulate(config: GILConfig) -> GILResult:
    """Timeline and speed-up of `config.n_threads` identical threads under the GIL."""
    _config_cost(config)
    segments = thread_segments(config)
    trace = _schedule([segments] * config.n_threads, config.switch_interval_s, config.n_cores)
    makespan = trace.end_s
    serial = config.n_threads * config.work_s
    held = sum(e.duration_s for e in trace.events if e.kind == "python")
    trace.meta.update({"n_threads": config.n_threads, "work_s": config.work_s,
                       "gil_share": config.gil_share, "n_ops": config.n_ops})
    return GILResult(
        trace=trace,
        makespan_s=makespan,
        serial_s=serial,
        speedup=serial / makespan if makespan > 0 else float(config.n_threads),
        predicted_speedup=predict_speedup(config.gil_share, config.n_threads,
                                           config.n_cores),
        gil_busy_fraction=held / makespan if makespan > 0 else 0.0,
    )
