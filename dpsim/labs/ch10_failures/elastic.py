"""Elastic runs of `scripts/train_elastic.py` under torchrun: a rank killed, the job restarted
from its last checkpoint; a rank that raises, and the root cause torchrun reports.

`run_elastic` starts every scenario at once (each its own torchrun, on loopback, in its
own session; all killed at the end whatever happened) and returns, per scenario, the exit
code, torchrun's output, the events the ranks logged, the final parameters and the error
file `@record` wrote (a dict, or None).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dpsim.runtime.torchrun import start_torchrun
from dpsim.sim import require_int, require_range

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "train_elastic.py"
# torchrun's agent shares its rendezvous TCPStore with the workers' init_process_group by
# default; the store outlives a restart, so a restarted worker can read the address its dead
# peer published in the previous attempt and fail to connect (gloo: connectFullMesh
# "Connection refused"; pytorch/pytorch#135712, seen here in 2 of 5 restarts on a loaded
# machine). Opting out gives every attempt a fresh store, hosted by its rank 0.
ELASTIC_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


@dataclass(frozen=True)
class Scenario:
    """One torchrun job: how many restarts it may use and how rank 1 fails (-1: never)."""

    name: str
    max_restarts: int = 1
    kill_at: int = -1  # rank 1 SIGKILLs itself before this step, first attempt only
    raise_at: int = -1  # rank 1 raises ValueError at this step, every attempt
    steps: int = 8
    ckpt_every: int = 2

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"name={self.name!r} is not allowed; allowed: an identifier")
        require_int("max_restarts", self.max_restarts, 0, 10)
        require_int("steps", self.steps, 1, 1000)
        require_int("ckpt_every", self.ckpt_every, 1, 1000)
        require_int("kill_at", self.kill_at, -1, self.steps - 1)
        require_int("raise_at", self.raise_at, -1, self.steps - 1)


@dataclass
class ElasticRun:
    """What one torchrun job did."""

    scenario: Scenario
    exit_code: int | None
    output: str
    seconds: float
    events: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, torch.Tensor] | None = None
    error_file: dict[str, Any] | None = None  # the earliest error.json @record wrote

    @property
    def attempts(self) -> int:
        """How many times torchrun started the workers."""
        return 1 + max((e["attempt"] for e in self.events), default=0)


def _args(s: Scenario, workdir: Path) -> tuple[list[str], list[str]]:
    # --standalone: the rendezvous store binds port 0 (the OS picks a free one), so jobs
    # started at once never race for a port
    torchrun = ["--standalone", "--nproc_per_node=2", f"--max-restarts={s.max_restarts}",
                "--monitor-interval=0.2", f"--log-dir={workdir / 'logs'}"]
    script = ["--workdir", str(workdir), "--steps", str(s.steps), "--ckpt-every",
              str(s.ckpt_every), "--kill-at", str(s.kill_at), "--raise-at", str(s.raise_at)]
    return torchrun, script


def _kill_workers(events: list[dict[str, Any]]) -> None:
    """SIGKILL every worker the job logged that still runs this script (torchrun starts
    workers in sessions of their own, so killing torchrun's group does not reach them)."""
    for pid in {int(e["pid"]) for e in events if "pid" in e}:
        with contextlib.suppress(OSError):
            if SCRIPT.name in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                os.kill(pid, signal.SIGKILL)


def _read_events(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _collect(s: Scenario, workdir: Path, proc: subprocess.Popen[str], started: float,
             deadline: float) -> ElasticRun:
    try:
        text, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # torchrun stops its workers on SIGTERM; then kill all
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            text, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            text = ""
        text += "\n[killed: timeout]"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    events = _read_events(workdir)
    _kill_workers(events)
    if proc.returncode is None:
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait(timeout=10)
    final = workdir / "final.pt"
    params = torch.load(final, weights_only=True) if final.exists() else None
    errors = [json.loads(p.read_text()) for p in (workdir / "logs").rglob("error.json")]
    error_file = min(errors, key=_timestamp) if errors else None  # the first failure
    return ElasticRun(s, proc.returncode, text, time.monotonic() - started,
                      sorted(events, key=lambda e: e["t"]), params, error_file)


def _timestamp(error: dict[str, Any]) -> int:
    """When a worker's error file says it failed (s), as torchrun orders root causes."""
    return int(error.get("message", {}).get("extraInfo", {}).get("timestamp", 0))


def run_elastic(workdir: str, scenarios: tuple[Scenario, ...], timeout_s: float = 150.0
                ) -> dict[str, ElasticRun]:
    """Run every scenario at once under torchrun (2 workers each) in `workdir/<name>`."""
    root = Path(workdir)
    if not root.is_dir():
        raise ValueError(f"workdir={workdir!r} is not a directory; allowed: an existing "
                         "writable directory (e.g. tempfile.mkdtemp())")
    require_range("timeout_s", timeout_s, 1, 3600)
    if len({s.name for s in scenarios}) != len(scenarios) or not scenarios:
        raise ValueError(f"scenarios={[s.name for s in scenarios]} is not allowed; allowed: "
                         "one or more Scenario with distinct names")
    started = time.monotonic()
    procs = {}
    for s in scenarios:
        d = root / s.name
        d.mkdir()
        torchrun, script = _args(s, d)
        procs[s.name] = (s, d, start_torchrun(torchrun, SCRIPT, script, ELASTIC_ENV))
    deadline = started + timeout_s
    return {name: _collect(s, d, p, started, deadline) for name, (s, d, p) in procs.items()}


def same_params(a: dict[str, torch.Tensor] | None, b: dict[str, torch.Tensor] | None
                ) -> bool:
    """True when both runs saved parameters and every tensor is bitwise equal."""
    return a is not None and b is not None and a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) for k in a)


def root_cause(output: str) -> str:
    """The "Root Cause" block of torchrun's failure summary (empty when there is none)."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if "Root Cause" in line]
    if not starts:
        return ""
    block = lines[starts[0]:]
    ends = [i for i, line in enumerate(block[1:], 1) if line.startswith("====")]
    return "\n".join(block[:ends[1] if len(ends) > 1 else len(block)])
