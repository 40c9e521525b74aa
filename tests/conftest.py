"""Shared fixtures: a tiny model, its workload, and a preset cluster."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from unittest import mock

import pytest
import torch

from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.models import mlp
from dpsim.sim.hardware import Cluster, get_cluster
from dpsim.sim.workload import Workload


@pytest.fixture
def tiny_model() -> torch.nn.Module:
    return mlp(16, 32, 2, 5, seed=0)


@pytest.fixture
def tiny_workload(tiny_model: torch.nn.Module) -> Workload:
    return workload_from_module(tiny_model, torch.randn(8, 16))


@pytest.fixture
def cluster() -> Cluster:
    return get_cluster("h100-node")



class _StartsAProcess(RuntimeError):
    """Raised when a test not marked `slow` starts a process."""


@contextlib.contextmanager
def _no_processes(item: pytest.Item) -> Iterator[None]:
    """Refuse every way of starting a process while `item` sets up or runs.

    The refusal raises where the process would start and, since code under test may catch
    that error (a grader reports it as a wrong answer), fails the test afterwards too.
    """
    import multiprocessing.process
    import subprocess

    import multiprocess.process

    refused: list[str] = []
    message = f"{item.nodeid} starts a process: mark it @pytest.mark.slow (tests/conftest.py)"

    def refuse(*_args: object, **_kwargs: object) -> None:
        refused.append(message)
        raise _StartsAProcess(message)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(subprocess.Popen, "__init__", refuse))
        stack.enter_context(mock.patch.object(multiprocessing.process.BaseProcess, "start",
                                              refuse))
        stack.enter_context(mock.patch.object(multiprocess.process.BaseProcess, "start",
                                              refuse))
        stack.enter_context(mock.patch.object(os, "fork", refuse))
        yield
    if refused:
        pytest.fail(message, pytrace=False)


def _guarded(item: pytest.Item) -> contextlib.AbstractContextManager[None]:
    """`make test-fast` runs the tests not marked `slow`; they must start no process.

    Process groups, notebooks, the grader's clean process and command-line runs all start
    processes; a test (or a fixture it uses) that does so without `@pytest.mark.slow`
    fails, so the fast suite stays fast and the marker stays honest.
    """
    if item.get_closest_marker("slow") is not None:
        return contextlib.nullcontext()
    return _no_processes(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _guarded(item):
        return (yield)
