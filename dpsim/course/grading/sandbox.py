"""The sandbox: a disposable process that runs the learner's function on case inputs.

`Sandbox.run(blob, forbidden, calls, timeout_s)` sends the learner's function (dill bytes,
never unpickled on this side) and each case's harness, args and kwargs to a fresh child
process and returns a `reply.Reply`: one outcome per case, read from a pipe as plain JSON
(`plain.decode`).
With `os.fork` the children come from a server that has imported torch, dill, the checks and
`dpsim.runtime.launch` once (a check of a simple exercise answers in well under a second
after the first); the server never runs learner code itself. Each child starts a new
session, caps its address space (`processes.limit_memory`), sends its prints to /dev/null,
and is killed with everything it started (`processes.kill_all`) once its cases are done or
its time is up. Without fork (Windows) each request starts a fresh interpreter.

The server runs `python -I -B`: no user site, no PYTHONPATH, no bytecode written; `lib`
names the folder it imports dpsim from (the grader passes its verified copy). `wrap`, when
given, turns the server's command line into the one to run (the grader's OS box,
`grading.box.command`), and `preexec` runs in the new process before it execs (the box's
rlimits).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pkgutil
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

from dpsim.course.grading import processes
from dpsim.course.grading.plain import decode
from dpsim.course.grading.reply import CaseCall, CaseOutcome, Reply

MAX_LINE_BYTES = 16 * 2**20  # one case's answer as JSON text
MAX_REPLY_BYTES = 64 * 2**20  # all answers of one request
START_ALLOWANCE_S = 120.0  # the server importing torch on a busy machine
_BOOT = ("import sys; sys.path[:0] = [{lib!r}]; "
         "from dpsim.course.grading.sandbox import {entry}; {entry}()")


def _emit_line(out: IO[bytes], kind: bytes, body: bytes = b"") -> None:
    out.write(kind + b" " + body + b"\n")
    out.flush()


def _child(payload: bytes, write_fd: int, memory_bytes: int) -> None:
    """In the forked child: new session, quiet stdio, memory cap, run the cases."""
    os.setsid()
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    processes.limit_memory(memory_bytes)
    import dill

    from dpsim.course.grading.sandbox_worker import run_request

    writer = os.fdopen(write_fd, "w", encoding="utf-8")

    def emit(line: str) -> None:
        writer.write(line + "\n")
        writer.flush()

    run_request(dill.loads(payload), emit)
    writer.close()


def _relay(read_fd: int, pid: int, deadline: float, out: IO[bytes]) -> None:
    """Forward the child's lines to the grader (size-capped) until it ends or time is up.

    The child has ended once it has exited and what it wrote is read: a process it left
    behind that still holds the pipe (a learner's fork) does not keep the grader waiting
    until the deadline; `_serve_one` kills that process."""
    buffered, total, status = b"", 0, None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            _emit_line(out, b"T")
            return
        if status is None:
            reaped, exited = os.waitpid(pid, os.WNOHANG)
            status = exited if reaped else None
        # once the child has exited, whatever it wrote is already in the pipe
        ready, _, _ = select.select([read_fd], [], [], 0 if status is not None else min(left, 0.5))
        if not ready and status is None:
            continue
        chunk = os.read(read_fd, 1 << 16) if ready else b""
        if not chunk:
            if status is None:
                _, status = os.waitpid(pid, 0)
            _emit_line(out, b"X", str(status).encode())
            return
        total += len(chunk)
        buffered += chunk
        if total > MAX_REPLY_BYTES or (b"\n" not in buffered and len(buffered) > MAX_LINE_BYTES):
            _emit_line(out, b"O")
            return
        *lines, buffered = buffered.split(b"\n")
        for line in lines:
            if len(line) > MAX_LINE_BYTES:
                _emit_line(out, b"O")
                return
            _emit_line(out, b"R", line)


def _serve_one(payload: bytes, timeout_s: float, memory_bytes: int, out: IO[bytes]) -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            _child(payload, write_fd, memory_bytes)
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        _relay(read_fd, pid, time.monotonic() + timeout_s, out)
    finally:
        os.close(read_fd)
        processes.kill_all(pid, os.environ.get(processes.TOKEN_VARIABLE))
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        _emit_line(out, b"D")


def serve() -> None:
    """Server loop: requests `<size> <timeout_s> <memory_bytes>\\n<payload>` on stdin."""
    import dill  # noqa: F401  (imported once here, inherited by every child)
    import torch

    import dpsim.runtime.launch  # noqa: F401  (harnesses launch ranks)
    from dpsim.course.grading.registry import all_exercises

    torch.set_num_threads(1)  # a thread pool used before fork would hang the children
    if importlib.util.find_spec("dpsim.course.exercises") is not None:
        all_exercises()  # every chapter module and the harnesses it defines
    else:  # the student's kit: no answer key, its copies of the key's harnesses
        harness = importlib.import_module("dpsim.course.harness")
        for info in pkgutil.iter_modules(harness.__path__):
            importlib.import_module(f"{harness.__name__}.{info.name}")
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    _emit_line(stdout, b"READY")
    while True:
        header = stdin.readline()
        if not header:
            return
        size, timeout_s, memory_bytes = header.split()
        payload = stdin.read(int(size))
        _serve_one(payload, float(timeout_s), int(memory_bytes), stdout)


def serve_one() -> None:
    """Without fork: one request from stdin, run in this very process."""
    out = os.fdopen(os.dup(1), "wb")
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 1)
    header = sys.stdin.buffer.readline()
    size, _, memory_bytes = header.split()
    payload = sys.stdin.buffer.read(int(size))
    processes.limit_memory(int(memory_bytes))
    import dill

    from dpsim.course.grading.sandbox_worker import run_request

    run_request(dill.loads(payload), lambda line: _emit_line(out, b"R", line.encode()))
    _emit_line(out, b"X", b"0")
    _emit_line(out, b"D")


def package_parent() -> Path:
    """The folder that holds the `dpsim` package this process imported."""
    return Path(__file__).resolve().parents[3]


def _parse(line: bytes, reply: Reply) -> None:
    """One `R <json>` line of a child into `reply` (anything malformed is dropped)."""
    try:
        row = decode(line)
    except ValueError:
        return
    if not isinstance(row, dict):
        return
    if isinstance(row.get("load_error"), str):
        reply.load_error = row["load_error"]
    elif type(row.get("i")) is int and row["i"] not in reply.outcomes:
        reply.outcomes[row["i"]] = cast(CaseOutcome, row)  # judge trusts no value's type


class Sandbox:
    """Learner functions run here, never in the caller's process; see the module docstring."""

    def __init__(self, lib: Path | None = None,
                 memory_bytes: int = processes.DEFAULT_MEMORY_BYTES,
                 env: dict[str, str] | None = None,
                 wrap: Callable[[list[str], dict[str, str]], list[str]] | None = None,
                 preexec: Callable[[], None] | None = None) -> None:
        self.lib = lib or package_parent()
        self.wrap, self.preexec = wrap, preexec
        self.memory_bytes = memory_bytes
        self.token = secrets.token_hex(12)
        self._env = dict(os.environ if env is None else env)
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self._ready = False

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _command(self, entry: str) -> list[str]:
        return [sys.executable, "-I", "-B", "-c", _BOOT.format(lib=str(self.lib), entry=entry)]

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in self._env.items() if not k.startswith("DPSIM_GRADING_SECRET")}
        env[processes.TOKEN_VARIABLE] = self.token
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def start(self) -> None:
        """Start the fork server (it imports torch while the caller goes on)."""
        if not hasattr(os, "fork") or (self._proc is not None and self._proc.poll() is None):
            return
        self._pending = b""
        argv, env, cwd = self._command("serve"), self._child_env(), str(self.lib)
        if self.wrap is not None:
            argv, env, cwd = self.wrap(argv, env), {"PATH": os.defpath}, "/"
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      env=env, cwd=cwd, start_new_session=True,
                                      preexec_fn=self.preexec)
        self._ready = False

    def close(self) -> None:
        """Stop the server and anything left of its children."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        with contextlib.suppress(ValueError):
            processes.kill_all(proc.pid, self.token)

    def run(self, blob: bytes, forbidden: tuple[str, ...] | list[str],
            calls: list[CaseCall], timeout_s: float) -> Reply:
        """Run `calls` (harness, args, kwargs) on the function in `blob`; never raises for
        the learner's code. `Reply.ended == "server"` is the grader's own failure."""
        import dill

        payload = dill.dumps({"blob": blob, "forbidden": list(forbidden), "calls": calls})
        header = f"{len(payload)} {timeout_s} {self.memory_bytes}\n".encode()
        if not hasattr(os, "fork"):
            return self._run_fresh(header + payload, timeout_s)
        self.start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        reply = Reply()
        allowance = timeout_s + 30 + (0 if self._ready else START_ALLOWANCE_S)
        try:
            proc.stdin.write(header + payload)
            proc.stdin.flush()
            self._read(proc.stdout.fileno(), time.monotonic() + allowance, reply)
        except (OSError, TimeoutError) as exc:
            reply.ended, reply.detail = "server", f"{type(exc).__name__}: {exc}"
            self.close()
        return reply

    def _read(self, fd: int, deadline: float, reply: Reply) -> None:
        while True:
            while b"\n" in self._pending:
                line, self._pending = self._pending.split(b"\n", 1)
                kind, _, body = line.partition(b" ")
                if kind == b"READY":
                    self._ready = True
                elif kind == b"R":
                    _parse(body, reply)
                elif kind == b"T":
                    reply.ended = "timeout"
                elif kind == b"O":
                    reply.ended = "oversize"
                elif kind == b"X" and body.strip() != b"0":
                    reply.ended, reply.detail = "exit", _status_words(int(body))
                elif kind == b"D":
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the sandbox server did not answer in time")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise OSError("the sandbox server ended")
                self._pending += chunk

    def _run_fresh(self, request: bytes, timeout_s: float) -> Reply:
        reply = Reply()
        proc = subprocess.Popen(self._command("serve_one"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=self._child_env(), cwd=self.lib)
        try:
            out, _ = proc.communicate(request, timeout=timeout_s + START_ALLOWANCE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            reply.ended = "timeout"
        for line in out[:MAX_REPLY_BYTES].splitlines():
            if line.startswith(b"R "):
                _parse(line[2:], reply)
        if reply.ended == "done" and proc.returncode:
            reply.ended, reply.detail = "exit", f"exit code {proc.returncode}"
        return reply


def _status_words(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
        return f"killed by signal {name}"
    return f"exit code {os.WEXITSTATUS(status)}"


_SHARED: list[Sandbox] = []


def shared() -> Sandbox:
    """The sandbox of this process's interactive `check()` calls (started on first use)."""
    if not _SHARED:
        import atexit

        _SHARED.append(Sandbox())
        atexit.register(_SHARED[0].close)
    return _SHARED[0]
