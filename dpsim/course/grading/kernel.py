"""A student's notebook run in a Jupyter kernel under limits the kernel cannot ignore.

The kernel starts in its own session (jupyter_client does `setsid`), with a random token
in its environment and an address-space cap (a small wrapper sets RLIMIT_AS, then execs
the kernel). Each cell gets `cell_timeout_s`: then SIGINT goes to the kernel's process
group, and if the cell has not stopped `grace_s` later, every process of the session (and
of the token) is killed; a fresh kernel then re-runs the earlier cells without the killed
one and goes on. The notebook as a whole gets `notebook_timeout_s`. Only the last cell's
printed text is kept (capped), which is how the learner's functions come back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

from dpsim.course.grading import processes

MAX_DUMP_CHARS = 64 * 2**20
_LIMIT_BOOT = ("import os, sys, resource; n = int(sys.argv[1]); "
               "resource.setrlimit(resource.RLIMIT_AS, (n, n)); "
               "os.execv(sys.argv[2], sys.argv[2:])")


@dataclass(frozen=True)
class Limits:
    """Time and memory a notebook gets (seconds, bytes)."""

    cell_timeout_s: float = 60.0
    notebook_timeout_s: float = 600.0
    memory_bytes: int = processes.DEFAULT_MEMORY_BYTES
    grace_s: float = 3.0  # after SIGINT, before SIGKILL


def _manager(memory_bytes: int) -> Any:
    from jupyter_client import KernelManager

    class LimitedKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            cmd: list[str] = super().format_kernel_cmd(extra_arguments)
            if os.name != "posix":
                return cmd
            return [sys.executable, "-B", "-c", _LIMIT_BOOT, str(memory_bytes), *cmd]

    return LimitedKernelManager(kernel_name="python3")


class Kernel:
    """One kernel of one notebook; `run(code, timeout_s)` -> ok|error|stopped|killed|died."""

    def __init__(self, workdir: Path, env: dict[str, str], limits: Limits) -> None:
        self.workdir, self.env, self.limits = workdir, env, limits
        self.token = env.get(processes.TOKEN_VARIABLE)
        self.km: Any = None
        self.kc: Any = None

    def start(self) -> None:
        """Start a kernel and wait until it answers."""
        self.km = _manager(self.limits.memory_bytes)
        # the kernel's own stdout/stderr go nowhere: what a cell prints comes over Jupyter's
        # channels, and nothing the learner writes to fd 1 or 2 reaches the grader's log
        self.km.start_kernel(env=dict(self.env), cwd=str(self.workdir),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    @property
    def pid(self) -> int:
        """Process id of the kernel (its session and process group id)."""
        return int(self.km.provisioner.process.pid)

    def stop(self) -> None:
        """Kill the kernel and every process of its session or token."""
        if self.km is None:
            return
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        with contextlib.suppress(Exception):
            processes.kill_all(self.pid, self.token)
        with contextlib.suppress(Exception):
            self.km.shutdown_kernel(now=True)
        with contextlib.suppress(Exception):
            self.km.cleanup_resources()
        self.km = self.kc = None

    def run(self, code: str, timeout_s: float, collect: bool = False) -> tuple[str, str]:
        """Execute `code`; (status, printed text if `collect`)."""
        msg_id = self.kc.execute(code, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        deadline = time.monotonic() + timeout_s
        kill_at: float | None = None
        text: list[str] = []
        size, status, idle = 0, "", False
        while True:
            with contextlib.suppress(Empty):
                msg = self.kc.get_iopub_msg(timeout=0.05)
                if msg["parent_header"].get("msg_id") == msg_id:
                    kind, content = msg["msg_type"], msg["content"]
                    if collect and kind == "stream" and size < MAX_DUMP_CHARS:
                        text.append(content.get("text", ""))
                        size += len(text[-1])
                    idle = idle or (kind == "status" and content["execution_state"] == "idle")
            with contextlib.suppress(Empty):
                reply = self.kc.get_shell_msg(timeout=0)
                if reply["parent_header"].get("msg_id") == msg_id:
                    ok = reply["content"].get("status") == "ok"
                    status = "stopped" if kill_at is not None else ("ok" if ok else "error")
            now = time.monotonic()
            if status and (idle or not collect or now > deadline + 5):
                return status, "".join(text)
            if not self.km.is_alive():
                return "died", ""
            if kill_at is None and now > deadline:
                with contextlib.suppress(OSError):
                    if hasattr(os, "killpg"):
                        os.killpg(self.pid, signal.SIGINT)
                    else:
                        self.km.interrupt_kernel()
                kill_at = now + self.limits.grace_s
            elif kill_at is not None and now > kill_at and not status:
                processes.kill_all(self.pid, self.token)
                return "killed", ""


def run_notebook(cells: list[str], prelude: str, dump: str, workdir: Path,
                 env: dict[str, str], limits: Limits, notes: list[str]) -> str:
    """Run `prelude`, the code cells, then `dump`; the text `dump` printed ('' if none)."""
    kernel = Kernel(workdir, env, limits)
    started = time.monotonic()
    skipped: set[int] = set()
    try:
        kernel.start()
        kernel.run(prelude, limits.cell_timeout_s)
        index = 0
        while index < len(cells):
            left = limits.notebook_timeout_s - (time.monotonic() - started)
            if left <= 0:
                notes.append(f"the notebook ran past {limits.notebook_timeout_s:g} s; cells "
                             f"from {index} on were skipped")
                break
            status, _ = kernel.run(cells[index], min(limits.cell_timeout_s, left))
            if status == "stopped":
                notes.append(f"cell {index} was stopped after {limits.cell_timeout_s:g} s")
            if status in ("killed", "died"):
                notes.append(f"cell {index} " + ("ignored the interrupt and was killed"
                                                 if status == "killed" else "ended the kernel")
                             + "; the cells before it were run again in a new kernel")
                skipped.add(index)
                kernel.stop()
                kernel.start()
                kernel.run(prelude, limits.cell_timeout_s)
                for earlier in range(index):
                    if earlier not in skipped:
                        kernel.run(cells[earlier], limits.cell_timeout_s)
            index += 1
        status, text = kernel.run(dump, max(limits.cell_timeout_s, 60.0), collect=True)
        if status != "ok":
            notes.append("the learner's functions could not be collected from the kernel "
                         f"({status})")
        return text
    finally:
        kernel.stop()
