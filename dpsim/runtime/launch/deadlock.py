"""Noticing, within seconds, that the unfinished ranks all wait for one another.

A rank blocked in `dist.recv`, a request's `.wait()` or a collective uses no CPU and its
threads sleep. Every `PERIOD_S` the launcher reads, for each unfinished rank (Linux:
/proc/<pid>/stat and /proc/<pid>/task/*/stat), its CPU time and which of its threads are
running, ready to run or in uninterruptible sleep. When over the last `QUIET_S` seconds
none of them used more than `IDLE_CPU_S`, none has such a thread now and none had the same
thread so in two samples in a row (a thread that wakes briefly, as the one watching the
launcher does every second, may be caught once, most often on a busy machine), it asks
them for their Python stacks (SIGUSR1 -> faulthandler, as on a timeout) and, when every
one is waiting in torch.distributed (`waiting_in`), calls it a deadlock: no rank can send
what another waits for. A rank that computes uses CPU or, on a machine so busy that it
barely gets any, stays ready to run; one that sleeps or reads a file is not waiting in
torch.distributed: neither is ever called deadlocked; the launch's timeout still applies
to them. Judging by the threads' own state, not by CPU time over wall time alone, keeps
the window short and the same on a loaded machine: a blocked rank sleeps however busy the
machine is, and a starved one is ready to run. Elsewhere than Linux nothing is watched
(the timeout alone applies).

The report (`describe`) says for each rank what it waits in, the line of the learner's code,
and the peer when the line names it by a plain number or an expression of `rank` and
`world_size`: "rank 1 waits for a message from rank 0, which never sent it (rank 0 waits
itself: ...)".
"""

from __future__ import annotations

import ast
import itertools
import linecache
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dpsim.runtime.launch.states import Frame, main_frames

PERIOD_S = 0.5  # how often the CPU times and thread states are read, seconds
QUIET_S = 1.0  # how long every unfinished rank must be idle before its stack is read, seconds
IDLE_CPU_S = 0.05  # CPU time a rank may use within QUIET_S and still count as idle, seconds
_WAIT_CALL = re.compile(r"\bwait\s*\(")
_NEAR = 3  # innermost frames looked at: wrappers (a check's counting ones) may sit above
_RECEIVES = {"recv": "src", "irecv": "src"}
_SENDS = {"send": "dst", "isend": "dst"}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process `pid` (all its threads), seconds; None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


def runnable_threads(pid: int) -> set[int] | None:
    """Threads of process `pid` running or ready to run (R) or in uninterruptible sleep (D):
    while one is, the process is not blocked waiting for another; None if unknown."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found = set()
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that just ended
        if state in (b"R", b"D"):
            found.add(int(task))
    return found


@dataclass(frozen=True)
class Wait:
    """What one rank waits in: the call, the learner's line, and the peer if known."""

    rank: int
    call: str  # "recv", "wait", "all_reduce", ...
    where: str  # "fn (file.py, line 7)"
    line: str  # the source line, stripped ('' if unknown)
    peer: int | None = None  # the rank it receives from, when the line says
    direction: str = ""  # "from" (a receive), "to" (a send), '' (a collective or unknown)

    def text(self) -> str:
        """'waits to receive from rank 0 in recv, at fn (file.py, line 7): `...`'."""
        what = f"waits in {self.call}"
        if self.call == "wait":
            what = "waits for a request (of isend/irecv) to complete (.wait())"
        if self.direction == "from":
            what = "waits for a message" + (f" from rank {self.peer}" if self.peer is not None
                                            else "") + f" ({self.call})"
        elif self.direction == "to":
            what = "waits until its message" + (f" to rank {self.peer}" if self.peer is not None
                                                else "") + f" is received ({self.call})"
        code = f": `{self.line}`" if self.line else ""
        return f"{what}, at {self.where}{code}"


def waiting_in(rank: int, world_size: int, dump: str) -> Wait | None:
    """What `rank` waits in, read from its faulthandler dump; None unless it waits in
    torch.distributed: one of its `_NEAR` innermost frames is there, or on a line that
    calls `.wait(` (a request's wait, possibly under a thin wrapper)."""
    frames, _ = main_frames(dump)
    near = frames[:_NEAR]
    first = next((i for i, frame in enumerate(near) if frame.in_distributed), None)
    if first is not None:
        top = first
        while top < len(frames) and frames[top].in_distributed:
            top += 1
        call = _public_name(frames[first:top])
        user = frames[top] if top < len(frames) else frames[-1]
    else:
        waiting = next((f for f in near if not f.in_library
                        and _WAIT_CALL.search(linecache.getline(f.path, f.line))), None)
        if waiting is None:
            return None
        user, call = waiting, "wait"
    line = linecache.getline(user.path, user.line).strip()
    peer, direction = _peer(call, line, rank, world_size)
    return Wait(rank, call, user.where(), line, peer, direction)


def _public_name(run: Sequence[Frame]) -> str:
    for frame in reversed(run):
        if not frame.name.startswith("_") and frame.name not in ("wrapper", "inner"):
            return frame.name
    return run[0].name


def _peer(call: str, line: str, rank: int, world_size: int) -> tuple[int | None, str]:
    """(peer, "from"/"to") of the send or receive on `line`, when it can be read there."""
    try:
        tree = ast.parse(line if not line.endswith(":") else line + " pass")
    except SyntaxError:
        return None, "from" if call in _RECEIVES else "to" if call in _SENDS else ""
    found: list[tuple[int | None, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(
            node.func, "id", "")
        table = _RECEIVES if name in _RECEIVES else _SENDS if name in _SENDS else None
        if table is None:
            continue
        key = table[name]
        arg = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == key), None)
        value = _evaluate(arg, {"rank": rank, "world_size": world_size})
        found.append((value % world_size if isinstance(value, int) else None,
                      "from" if table is _RECEIVES else "to"))
    if call in _RECEIVES or call in _SENDS:
        wanted = "from" if call in _RECEIVES else "to"
        found = [f for f in found if f[1] == wanted] or [(None, wanted)]
    receives = [f for f in found if f[1] == "from"]
    if receives:  # a line that sends and receives waits, in the end, for what it receives
        return receives[0]
    return found[0] if found else (None, "")


def _evaluate(node: ast.AST | None, names: dict[str, int]) -> int | None:
    """An integer expression of constants, `rank` and `world_size` (+ - * // %); None if
    it uses anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _evaluate(node.operand, names)
        return None if inner is None else -inner
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if left is None or right is None:
            return None
        ops: dict[type, Callable[[int, int], int]] = {
            ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
            ast.FloorDiv: lambda a, b: a // b if b else 0,
            ast.Mod: lambda a, b: a % b if b else 0}
        op = ops.get(type(node.op))
        return None if op is None else op(left, right)
    return None


def describe(waits: dict[int, Wait], finished: Sequence[int]) -> dict[int, str]:
    """rank -> one line on what it waits for, naming the peer that never sends when known."""
    out: dict[int, str] = {}
    for rank, wait in sorted(waits.items()):
        text = wait.text()
        if wait.peer is not None and wait.direction == "from":
            if wait.peer in finished:
                text = (f"waits for a message rank {wait.peer} never sent (rank {wait.peer} "
                        f"finished fn); {text}")
            elif wait.peer in waits:
                peer = waits[wait.peer]
                text = (f"waits for a message rank {wait.peer} never sent (rank {wait.peer} "
                        f"{_short(peer)}); {text}")
            elif wait.peer == rank:
                text = f"waits for a message from itself; {text}"
        out[rank] = text
    return out


def _short(wait: Wait) -> str:
    if wait.direction == "from":
        return "waits itself for a message" + (f" from rank {wait.peer}"
                                               if wait.peer is not None else "")
    if wait.direction == "to":
        return "waits until its own send" + (f" to rank {wait.peer}"
                                             if wait.peer is not None else "") + " is received"
    return f"waits in {wait.call}"


@dataclass
class Watch:
    """The launcher's watch over one launch's unfinished ranks (see the module doc).

    `read_stacks(ranks)` returns rank -> faulthandler dump; `all_joined()` whether every rank
    joined the process group (before that, waiting is start-up, not a deadlock).
    """

    pids: Sequence[int | None]
    world_size: int
    read_stacks: Callable[[list[int]], dict[int, str]]
    all_joined: Callable[[], bool]
    quiet_s: float = QUIET_S
    # (when, rank -> CPU seconds, threads found runnable (thread ids))
    _samples: list[tuple[float, dict[int, float], set[int]]] = field(default_factory=list)
    _next_s: float = 0.0
    _checked_at: float = -1e18
    dumps: dict[int, str] = field(default_factory=dict)
    enabled: bool = True

    def check(self, pending: list[int]) -> dict[int, Wait] | None:
        """rank -> what it waits in, when every rank in `pending` waits (a deadlock); None
        while any of them computes, sleeps, starts, or was not idle long enough."""
        now = time.monotonic()
        if not self.enabled or not pending or now < self._next_s:
            return None
        self._next_s = now + PERIOD_S
        cpu = {}
        runs = set()
        for rank in pending:
            pid = self.pids[rank]
            seconds = cpu_seconds(pid) if pid is not None else None
            running = runnable_threads(pid) if pid is not None else None
            if seconds is None or running is None:
                self.enabled = False  # no /proc: the timeout alone applies
                return None
            cpu[rank] = seconds
            runs |= running
        self._samples.append((now, cpu, runs))
        old = [s for s in self._samples if now - s[0] >= self.quiet_s]
        self._samples = [s for s in self._samples if now - s[0] < self.quiet_s + PERIOD_S]
        if not old or now - self._checked_at < self.quiet_s:
            return None
        then = old[-1][1]
        if any(rank not in then or cpu[rank] - then[rank] > IDLE_CPU_S for rank in pending):
            return None
        if runs:
            return None  # a thread of a rank is ready to run: maybe starved of CPU, not blocked
        window = [s for s in self._samples if s[0] >= old[-1][0]]
        if any(a[2] & b[2] for a, b in itertools.pairwise(window)):
            return None  # a thread stayed ready to run: a rank starved of CPU, not blocked
        if not self.all_joined():
            return None
        self._checked_at = now
        dumps = self.read_stacks(pending)
        waits = {}
        for rank in pending:
            wait = waiting_in(rank, self.world_size, dumps.get(rank, ""))
            if wait is None:
                return None
            waits[rank] = wait
        self.dumps = dumps
        return waits
