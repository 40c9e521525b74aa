"""How ranks start: forked from the fork server (torch imported once), or spawned."""

from __future__ import annotations

import os
import sys

import pytest

from dpsim.runtime.launch import launch
from dpsim.runtime.launch.start import start_method

FORK_SERVER = sys.platform.startswith("linux")  # ranks are forked on Linux only


@pytest.mark.skipif(not FORK_SERVER, reason="ranks are forked from the fork server on Linux only")
def test_ranks_are_forked_unless_the_launch_sets_variables(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    monkeypatch.delenv("DPSIM_START_METHOD", raising=False)
    assert start_method({}) == "forkserver"
    assert start_method({"OMP_NUM_THREADS": "1"}) == "spawn"  # read when torch loads
    monkeypatch.setenv("DPSIM_START_METHOD", "spawn")
    assert start_method({}) == "spawn"


def test_ranks_are_spawned_off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPSIM_START_METHOD", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert start_method({}) == "spawn"


def test_an_unknown_start_method_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSIM_START_METHOD", "fork")
    with pytest.raises(ValueError, match=r"DPSIM_START_METHOD='fork'.*forkserver, spawn"):
        start_method({})


def _seen(rank: int, world_size: int) -> dict[str, object]:
    import random

    import numpy as np
    import torch

    return {"draws": (random.getrandbits(62), int(np.random.randint(0, 2**62))),
            "parent": os.getppid(), "late": os.environ.get("DPSIM_LATE_VARIABLE"),
            "gone": os.environ.get("DPSIM_GONE_VARIABLE"), "threads": torch.get_num_threads(),
            "rank_env": os.environ["RANK"]}


@pytest.mark.slow
@pytest.mark.skipif(not FORK_SERVER, reason="ranks are forked from the fork server on Linux only")
def test_forked_ranks_see_the_launcher_s_environment_as_it_is_now(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPSIM_START_METHOD", raising=False)
    monkeypatch.setenv("DPSIM_GONE_VARIABLE", "1")
    first = launch(_seen, 2, backend="gloo")  # the fork server starts with this environment
    monkeypatch.setenv("DPSIM_LATE_VARIABLE", "2")
    monkeypatch.delenv("DPSIM_GONE_VARIABLE")
    second = launch(_seen, 2, backend="gloo")
    parents = {r["parent"] for r in first + second}
    assert len(parents) == 1, "ranks not forked from one server"
    assert parents != {os.getpid()}, "ranks spawned by the launcher"
    assert [r["late"] for r in second] == ["2", "2"]
    assert [r["gone"] for r in second] == [None, None]
    assert [r["rank_env"] for r in second] == ["0", "1"]
    draws = [r["draws"] for r in first + second]
    assert len({d[0] for d in draws}) == 4, "Python's random repeats across ranks"
    assert len({d[1] for d in draws}) == 4, "numpy's global generator repeats across ranks"
    cores = len(os.sched_getaffinity(0))
    assert [r["threads"] for r in second] == [max(1, cores // 2)] * 2


@pytest.mark.slow
def test_a_launch_with_its_own_variables_is_spawned() -> None:
    ranks = launch(_seen, 1, backend="gloo", env={"OMP_NUM_THREADS": "1"})
    assert ranks[0]["parent"] == os.getpid()
    assert ranks[0]["threads"] == 1
