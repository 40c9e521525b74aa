"""dpsim's DDP buckets against torch's own rules, read from the installed torch.

Each test calls torch (its bucket-capacity config and its C++ bucket assignment), so it
fails when torch changes what dpsim encodes: the one-bucket first iteration, the capped
buckets with find_unused_parameters=True, and the first bucket's cap.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import distributed as ddp_mod

from dpsim.sim.strategies.ddp import (
    DEFAULT_BUCKET_CAP_MB,
    DEFAULT_FIRST_BUCKET_CAP_MB,
    DDPConfig,
    GradTensor,
    MiB,
    buckets_of,
    build_buckets,
    first_bucket_cap_for,
    first_iteration_buckets,
    simulate,
)
from dpsim.sim.strategies.ddp.buckets import FIRST_ITERATION_CAP_BYTES

config = pytest.importorskip("torch.nn.parallel.distributed")._BucketCapacityConfig


def test_first_iteration_is_one_bucket_unless_find_unused_parameters() -> None:
    cfg = config.create(None, None, False)
    assert cfg.compute_bucket_size_limits(False, False)[0] == [sys.maxsize]
    assert sys.maxsize == FIRST_ITERATION_CAP_BYTES
    assert cfg.compute_bucket_size_limits(True, True)[0] == [sys.maxsize]  # static_graph
    # capped buckets from construction only with find_unused_parameters=True
    assert cfg.compute_bucket_size_limits(False, True)[0] == [
        int(DEFAULT_FIRST_BUCKET_CAP_MB * MiB), int(DEFAULT_BUCKET_CAP_MB * MiB)]


def test_explicit_bucket_cap_caps_the_first_bucket_too() -> None:
    assert ddp_mod._DEFAULT_BUCKET_CAP_MB == DEFAULT_BUCKET_CAP_MB
    assert DEFAULT_FIRST_BUCKET_CAP_MB * MiB == dist._DEFAULT_FIRST_BUCKET_BYTES
    assert config.create(None, None, False).first_bucket_bytes_cap == (
        first_bucket_cap_for(None) * MiB)
    for cap in (10, 25, 100):  # even 25 passed explicitly
        assert config.create(cap, None, False).first_bucket_bytes_cap == (
            first_bucket_cap_for(cap) * MiB)


@pytest.mark.parametrize("cap_mb", [0.001, 0.01, 1.0])
def test_capped_buckets_match_torchs_assignment(cap_mb: float) -> None:
    """torch's C++ assignment over the reverse of the parameters, dpsim's the same."""
    sizes = [3000, 7, 1200, 5000, 16, 4100, 9, 900]  # fp32 elements per parameter
    params = [torch.zeros(n) for n in sizes]
    first = cap_mb / 4  # a smaller first bucket, as torch's default
    limits = [int(first * MiB), int(cap_mb * MiB)]
    indices, _ = dist._compute_bucket_assignment_by_size(
        list(reversed(params)), limits, [False] * len(params))
    theirs = [[len(sizes) - 1 - i for i in bucket] for bucket in indices]
    tensors = [GradTensor(f"p{i}", 4 * n) for i, n in enumerate(sizes)]
    ours = [[int(name[1:]) for name in b.params]
            for b in build_buckets(tensors, cap_mb, first)]
    assert ours == theirs


def test_first_iteration_simulated_as_one_bucket_after_backward() -> None:
    from dpsim.sim.hardware import CLUSTERS
    from dpsim.sim.workload import get_workload

    workload, cluster = get_workload("gpt2-124m"), CLUSTERS["h100-node"]
    first = simulate(workload, cluster, DDPConfig(8, first_iteration=True))
    later = simulate(workload, cluster, DDPConfig(8))
    assert len(buckets_of(first)) == 1 < len(buckets_of(later))
    assert buckets_of(first)[0].nbytes == sum(b.nbytes for b in buckets_of(later))
    backward_end = max(e.end_s for e in first.events if e.kind == "backward")
    assert min(e.start_s for e in first.events if e.kind == "all_reduce") >= backward_end
    assert first_iteration_buckets([]) == []


def test_explorer_first_bucket_follows_torch() -> None:
    from dpsim.widgets.ddp_explorer import explore

    def text(**kw: bool) -> str:
        return explore("gpt2-124m", "h100-80gb", "PCIe 4.0 x16", 4, 10.0, 8, True, **kw)[2]

    assert "caps 10 MiB, first bucket 10 MiB (bucket_cap_mb passed)" in text(pass_cap=True)
    assert "caps 25 MiB, first bucket 1 MiB (torch defaults)" in text(pass_cap=False)
    assert "in 1 bucket," in text(first_iteration=True)
