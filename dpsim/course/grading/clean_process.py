"""Run the checks on a learner's pickled functions in a process where no learner code ran.

A server process imports torch and the checks once (building each exercise's cases once,
so torch's lazy imports happen there), then forks one child per request (one notebook's
functions). The child loads the functions, runs each check under
a time limit and writes one JSON line per exercise; the server kills a child that runs
past its total limit. Without `os.fork` (Windows), each request gets a fresh process.
Results go to files, never through the learner's stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from dpsim.course.grading.core import get_exercise, run_check

IMPORT_ALLOWANCE_S = 60.0  # start-up of a process that imports torch and the checks
_BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
         "from dpsim.course.grading.clean_process import {entry}; {entry}()")


class _CheckTimeout(BaseException):
    """Raised by SIGALRM in the child when one exercise runs too long."""


def run_checks(dump_path: str, plan: dict[str, list[str]], out_path: str,
               timeout_s: float) -> None:
    """Check each planned exercise on the first of its names found in the dump file."""
    import dill

    for exercise_id in plan:  # import the checks before any learner code runs
        with contextlib.suppress(ValueError):
            get_exercise(exercise_id)
    found: dict[str, Any] = {}
    if Path(dump_path).exists():
        with open(dump_path, "rb") as f:
            found = pickle.load(f)

    def on_alarm(signum: int, frame: Any) -> None:
        raise _CheckTimeout

    can_alarm = hasattr(signal, "setitimer")
    if can_alarm:
        signal.signal(signal.SIGALRM, on_alarm)
    with open(out_path, "a", encoding="utf-8") as out:
        for exercise_id, names in plan.items():
            row: dict[str, Any] = {"id": exercise_id, "passed": 0, "total": 0}
            blob = next((found[n] for n in names if isinstance(found.get(n), bytes)), None)
            if blob is None:
                why = next((f"`{n}` {found[n]}" for n in names if n in found), None)
                row["message"] = why or f"`{names[0]}` is not defined in the notebook"
            else:
                try:
                    if can_alarm:
                        signal.setitimer(signal.ITIMER_REAL, timeout_s)
                    result = run_check(exercise_id, dill.loads(blob))
                    row.update(passed=result.passed, total=result.total,
                               message=result.message)
                except _CheckTimeout:
                    row["message"] = f"the check took longer than {timeout_s:g} s"
                except BaseException as exc:  # learner code may raise anything, even SystemExit
                    row["message"] = f"checking stopped: {type(exc).__name__}: {exc}"
                finally:
                    if can_alarm:
                        signal.setitimer(signal.ITIMER_REAL, 0)
            out.write(json.dumps(row) + "\n")
            out.flush()


def _child(request: dict[str, Any]) -> None:
    """In the forked child: cut stdin/stdout off from the server, then check."""
    quiet = os.open(request["err"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.dup2(quiet, 1)  # learner prints go to a file, not to the grader
    os.dup2(quiet, 2)
    run_checks(request["dump"], request["plan"], request["out"], request["timeout_s"])


def serve() -> None:
    """Server loop: one JSON request per stdin line, answered by `done` once checked."""
    import dill  # noqa: F401  (imported once here, inherited by every child)
    import torch

    torch.set_num_threads(1)  # a thread pool used before fork would hang the children
    warm: set[str] = set()
    for line in sys.stdin:
        request = json.loads(line)
        for exercise_id in sorted(set(request["plan"]) - warm):  # import the checks and
            warm.add(exercise_id)  # let torch do its lazy imports here, not in the timed child
            with contextlib.suppress(Exception):
                get_exercise(exercise_id).cases()
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            finally:
                os._exit(0)
        deadline = time.monotonic() + request["total_s"]
        while os.waitpid(pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                with open(request["err"], "a", encoding="utf-8") as f:
                    f.write(f"\nthe checking process was stopped after {request['total_s']:g} s")
                break
            time.sleep(0.02)
        sys.stdout.write("done\n")
        sys.stdout.flush()


def serve_one() -> None:
    """Without fork: check one request read from stdin in this very process."""
    request = json.loads(sys.stdin.readline())
    _child(request)


def _command(entry: str) -> list[str]:
    return [sys.executable, "-c", _BOOT.format(entry=entry)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join([package_parent, *filter(None, [env.get("PYTHONPATH")])])
    return env


def read_results(out_path: Path) -> dict[str, dict[str, Any]]:
    """Exercise id -> {"id", "passed", "total", "message"} for each finished exercise."""
    results: dict[str, dict[str, Any]] = {}
    if out_path.exists():
        for line in out_path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                row = json.loads(line)
                results[row["id"]] = row
    return results


class CheckServer:
    """A clean checking process, started on first use; `with CheckServer() as s: s.check(...)`."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._home = tempfile.mkdtemp(prefix="dpsim-checks-")

    def __enter__(self) -> CheckServer:
        if hasattr(os, "fork"):
            self._start()  # imports torch while the first notebook runs
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server and remove its working folder."""
        shutil.rmtree(self._home, ignore_errors=True)
        if self._proc is not None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def check(self, dump_path: Path, plan: dict[str, list[str]], workdir: Path,
              timeout_s: float) -> tuple[dict[str, dict[str, Any]], str]:
        """Check the functions in `dump_path`; return the results and the child's stderr."""
        out, err = workdir / "results.jsonl", workdir / "stderr.txt"
        total_s = timeout_s * max(1, len(plan)) + IMPORT_ALLOWANCE_S
        request = json.dumps({"dump": str(dump_path), "plan": plan, "out": str(out),
                              "err": str(err), "timeout_s": timeout_s, "total_s": total_s})
        if hasattr(os, "fork"):
            self._ask(request)
        else:
            os.makedirs(self._home, exist_ok=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(_command("serve_one"), input=request + "\n", text=True,
                               env=_env(), cwd=self._home, timeout=total_s, check=False,
                               stdout=subprocess.DEVNULL)
        tail = err.read_text(errors="replace")[-2000:] if err.exists() else ""
        return read_results(out), tail

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            os.makedirs(self._home, exist_ok=True)
            self._proc = subprocess.Popen(_command("serve"), stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, env=_env(),
                                          cwd=self._home)
        return self._proc

    def _ask(self, request: str) -> None:
        proc = self._start()
        stdin: IO[str] | None = proc.stdin
        assert stdin is not None
        assert proc.stdout is not None
        try:
            stdin.write(request + "\n")
            stdin.flush()
            answer = proc.stdout.readline()
        except OSError:
            answer = ""
        if answer.strip() != "done":  # the server died: start a new one next time
            self.close()
