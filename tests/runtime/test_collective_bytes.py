"""CollectiveBytes counts each collective once, on the thread it runs on or off it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from dpsim.runtime.collective_bytes import CollectiveBytes


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A one-rank gloo process group in this process, destroyed afterwards."""
    store: Path = tmp_path_factory.mktemp("rendezvous") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_counts_kind_dtype_and_bytes(group: None) -> None:
    with CollectiveBytes() as comm:
        dist.all_reduce(torch.ones(10))
        dist.all_reduce(torch.ones(4, dtype=torch.float16))
        dist.broadcast(torch.ones(3), src=0)
    assert [(c.kind, c.dtype, c.nbytes) for c in comm.calls] == [
        ("all_reduce", "torch.float32", 40), ("all_reduce", "torch.float16", 8),
        ("broadcast", "torch.float32", 12)]
    assert comm.bytes_by_kind() == {"all_reduce": 48, "broadcast": 12}
    assert comm.calls_by_kind() == {"all_reduce": 2, "broadcast": 1}
    assert comm.total_bytes() == 60


def test_a_collective_on_another_thread_is_counted_once(group: None) -> None:
    with CollectiveBytes() as comm:
        worker = threading.Thread(target=lambda: dist.all_reduce(torch.ones(5)))
        worker.start()
        worker.join()
        dist.all_reduce(torch.ones(2))
    assert sorted(c.nbytes for c in comm.calls) == [8, 20]


def test_torch_distributed_is_restored_and_nothing_counted_outside(group: None) -> None:
    real = dist.all_reduce
    with CollectiveBytes() as comm:
        assert dist.all_reduce is not real
    assert dist.all_reduce is real
    dist.all_reduce(torch.ones(3))
    assert comm.calls == []


def test_sample_keeps_the_peak(group: None) -> None:
    values = iter(range(100))
    with CollectiveBytes(sample=lambda: next(values)) as comm:
        torch.ones(2) + 1
        torch.ones(2) * 2
    assert comm.peak_sample >= 1
