"""The deadlock watch judges a rank by its own threads' state, so a machine's load changes
neither what it calls a deadlock nor how soon (dpsim/runtime/launch/deadlock.py)."""

from __future__ import annotations

import sys
import time

import pytest

from dpsim.runtime.launch import deadlock

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

_RECV_DUMP = """Thread 0x00007f (most recent call first):
  File "/x/torch/distributed/distributed_c10d.py", line 2000 in recv
  File "/x/torch/distributed/c10d_logger.py", line 80 in wrapper
  File "/tmp/learner.py", line 3 in ring
  File "/x/dpsim/runtime/launch/rank.py", line 150 in _run_fn
"""


def _watch(monkeypatch: pytest.MonkeyPatch, runnable: bool) -> tuple[deadlock.Watch, list[int]]:
    """A watch over two ranks whose CPU time never grows (asleep, or starved of CPU)."""
    monkeypatch.setattr(deadlock, "cpu_seconds", lambda pid: 1.0)
    monkeypatch.setattr(deadlock, "runnable_threads", lambda pid: {pid} if runnable else set())
    asked: list[int] = []

    def read_stacks(ranks: list[int]) -> dict[int, str]:
        asked.extend(ranks)
        return {rank: _RECV_DUMP for rank in ranks}

    return deadlock.Watch([101, 102], 2, read_stacks, all_joined=lambda: True), asked


def _watch_for(watch: deadlock.Watch, seconds: float) -> tuple[dict[int, deadlock.Wait] | None,
                                                                float]:
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        found = watch.check([0, 1])
        if found is not None:
            return found, time.monotonic() - start
        time.sleep(0.05)
    return None, seconds


def test_asleep_and_idle_ranks_are_a_deadlock_within_about_a_second(
        monkeypatch: pytest.MonkeyPatch) -> None:
    watch, asked = _watch(monkeypatch, runnable=False)
    found, after = _watch_for(watch, 5.0)
    assert found is not None
    assert sorted(found) == [0, 1]
    assert found[0].call == "recv"
    assert deadlock.QUIET_S <= after < deadlock.QUIET_S + 2 * deadlock.PERIOD_S + 0.5
    assert asked == [0, 1]


def test_a_rank_starved_of_cpu_is_not_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CPU time gained, but a thread ready to run: a busy machine, not a wait."""
    watch, asked = _watch(monkeypatch, runnable=True)
    found, _ = _watch_for(watch, deadlock.QUIET_S + 3 * deadlock.PERIOD_S)
    assert found is None
    assert asked == []  # not even its stacks were asked for


@pytest.mark.slow
def test_thread_states_of_real_processes() -> None:
    import subprocess

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    asleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(1.0)
        seen = [deadlock.runnable_threads(busy.pid) for _ in range(20)]
        assert {busy.pid} in seen  # running or runnable nearly always
        assert deadlock.runnable_threads(asleep.pid) == set()
    finally:
        for proc in (busy, asleep):
            proc.kill()
            proc.wait(10)
    assert deadlock.runnable_threads(busy.pid) is None  # gone
