"""Shared fixtures: a tiny model, its workload, and a preset cluster."""

from __future__ import annotations

import pytest
import torch

from dpsim.hardware import Cluster, get_cluster
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.models import mlp
from dpsim.workload import Workload


@pytest.fixture
def tiny_model() -> torch.nn.Module:
    return mlp(16, 32, 2, 5, seed=0)


@pytest.fixture
def tiny_workload(tiny_model: torch.nn.Module) -> Workload:
    return workload_from_module(tiny_model, torch.randn(8, 16))


@pytest.fixture
def cluster() -> Cluster:
    return get_cluster("h100-node")
