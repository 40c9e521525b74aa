"""scripts/train_ddp.py under the venv's torchrun: one node, and two nodes over 127.0.0.1.

All three torchrun commands start at once (2 cores: they overlap their start-up), each in
its own process group with a hard timeout; every process of every group is killed at
the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dpsim.runtime.launch import free_port
from dpsim.runtime.torchrun import start_torchrun

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "train_ddp.py"
TIMEOUT_S = 100.0  # per command, start-up of torch in 3-4 processes included
CHECKSUM = re.compile(r"rank (\d+)/(\d+): final loss [\d.]+, checksum ([\d.]+)")


def _start(args: list[str]) -> subprocess.Popen[str]:
    return start_torchrun(args, SCRIPT, ["--steps", "3"])


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    """Output of: standalone with 2 processes; node 0 and node 1 of a two-node run."""
    port = free_port()
    rdzv = ["--nnodes=2", "--nproc_per_node=1", f"--rdzv-endpoint=127.0.0.1:{port}"]
    procs = {
        "standalone": _start(["--standalone", "--nproc_per_node=2"]),
        "node0": _start([*rdzv, "--node_rank=0"]),
        "node1": _start([*rdzv, "--node_rank=1"]),
    }
    out: dict[str, str] = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for name, proc in procs.items():
            try:
                text, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                text = (proc.stdout.read() if proc.stdout else "") + "\n[killed: timeout]"
            out[name] = f"exit code {proc.returncode}\n{text}"
    finally:
        for proc in procs.values():
            _kill_group(proc)
    time.sleep(0.2)
    out["leftovers"] = ",".join(n for n, p in procs.items() if _group_alive(p.pid))
    return out


def _checksums(text: str) -> dict[int, tuple[int, str]]:
    return {int(r): (int(n), c) for r, n, c in CHECKSUM.findall(text)}


@pytest.mark.slow
def test_torchrun_standalone_runs_two_ranks(outputs: dict[str, str]) -> None:
    text = outputs["standalone"]
    assert text.startswith("exit code 0"), text[-3000:]
    found = _checksums(text)
    assert sorted(found) == [0, 1], text[-3000:]
    assert found[0] == found[1]
    assert found[0][0] == 2
    assert "world_size 2, backend gloo" in text or "backend nccl" in text


@pytest.mark.slow
def test_torchrun_two_nodes_over_loopback(outputs: dict[str, str]) -> None:
    node0, node1 = outputs["node0"], outputs["node1"]
    assert node0.startswith("exit code 0"), node0[-3000:]
    assert node1.startswith("exit code 0"), node1[-3000:]
    ranks = {**_checksums(node0), **_checksums(node1)}
    assert sorted(ranks) == [0, 1]
    assert ranks[0] == ranks[1]
    # the same training as the standalone run: same world size, same data, same result
    assert ranks[0] == _checksums(outputs["standalone"])[0]


@pytest.mark.slow
def test_no_process_is_left_behind(outputs: dict[str, str]) -> None:
    assert outputs["leftovers"] == ""
