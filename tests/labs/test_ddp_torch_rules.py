"""What chapter 5 teaches about DDP, pinned against the installed torch.

Each test reads torch's source or runs DDP in a one-rank gloo group in this process, so it
fails when torch changes the behaviour notebooks/05_ddp.ipynb states: buckets never rebuilt
with find_unused_parameters=True (the 1 MiB first bucket: the first-defined parameters,
reduced last), no_sync's decision taken in forward, backward() waiting for every bucket,
the two names of buffer sync, and gradient_as_bucket_view's copy with set_to_none=True.
"""

from __future__ import annotations

import inspect
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

TORCH = Path(torch.__file__).parent


def _net() -> nn.Sequential:
    """2.6 MB of float32 parameters: more than the 1 MiB first bucket."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(48, 600), nn.ReLU(), nn.Linear(600, 600), nn.ReLU(),
                         nn.Linear(600, 10))


def _bucket_order(**options: Any) -> list[list[list[str]]]:
    """Per step, the buckets in the order DDP all-reduced them, as parameter names."""
    net = _net()
    names = {id(p): n for n, p in net.named_parameters()}
    model = DDP(net, **options)
    steps: list[list[list[str]]] = []

    def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        steps[-1].append([names[id(p)] for p in bucket.parameters()])
        return allreduce_hook(None, bucket)  # type: ignore[arg-type]

    hook.__annotations__.update(bucket=dist.GradBucket, state=object,
                                **{"return": torch.futures.Future[torch.Tensor]})
    model.register_comm_hook(None, hook)
    for _ in range(3):
        steps.append([])
        F.cross_entropy(model(torch.randn(4, 48)), torch.randint(0, 10, (4,))).backward()
    return steps


def test_reducer_rebuilds_only_without_find_unused_parameters_or_with_static_graph() -> None:
    header = (TORCH / "include/torch/csrc/distributed/c10d/reducer.hpp").read_text()
    assert "return (static_graph_ || !find_unused_parameters_) && !has_rebuilt_bucket_;" in header


def test_find_unused_parameters_keeps_its_construction_buckets(group: None) -> None:
    default = _bucket_order()
    assert len(default[0]) == 1  # step 1: one bucket
    assert default[2][0][0] == "4.bias"  # rebuilt: the last layer's gradients first
    unused = _bucket_order(find_unused_parameters=True)
    assert unused[0] == unused[2]  # never rebuilt
    # filled in parameter order, then reversed: the 1 MiB bucket holds the first-defined
    # parameters and is all-reduced last
    assert unused[2][-1] == ["0.weight", "0.bias", "2.weight"]
    assert _bucket_order(static_graph=True)[2] == default[2]  # rebuilt once, as the default


def _count_all_reduces(forward_inside: bool) -> int:
    model = DDP(_net())
    calls: list[int] = []

    def hook(state: list[int], bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        state.append(bucket.index())
        return allreduce_hook(None, bucket)  # type: ignore[arg-type]

    hook.__annotations__.update(bucket=dist.GradBucket, state=list,
                                **{"return": torch.futures.Future[torch.Tensor]})
    model.register_comm_hook(calls, hook)
    x, y = torch.randn(4, 48), torch.randint(0, 10, (4,))
    if forward_inside:
        with model.no_sync():
            F.cross_entropy(model(x), y).backward()
    else:
        loss = F.cross_entropy(model(x), y)
        with model.no_sync():
            loss.backward()
    return len(calls)


def test_no_sync_needs_the_forward_inside(group: None) -> None:
    assert _count_all_reduces(forward_inside=True) == 0
    assert _count_all_reduces(forward_inside=False) > 0  # forward outside: it all-reduces


def test_backward_returns_after_every_bucket_completed(group: None) -> None:
    model = DDP(_net())
    done: list[float] = []

    def slow_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        buffer = bucket.buffer()

        def finish() -> None:
            time.sleep(0.2)
            done.append(time.perf_counter())
            future.set_result(buffer)

        threading.Thread(target=finish).start()
        return future

    slow_hook.__annotations__.update(bucket=dist.GradBucket, state=object,
                                     **{"return": torch.futures.Future[torch.Tensor]})
    model.register_comm_hook(None, slow_hook)
    F.cross_entropy(model(torch.randn(4, 48)), torch.randint(0, 10, (4,))).backward()
    returned = time.perf_counter()
    assert done
    assert max(done) <= returned


def test_forward_sync_buffers_is_the_new_name_from_2_13() -> None:
    params = inspect.signature(DDP.__init__).parameters
    assert "broadcast_buffers" in params  # the old name, still taken
    assert ("forward_sync_buffers" in params) == (torch.__version__ >= "2.13")


def test_gradient_as_bucket_view_still_copies_with_set_to_none() -> None:
    doc = DDP.__doc__ or ""
    assert "``optimizer.zero_grad(set_to_none=True)`` (the default), where" in doc
    assert "``gradient_as_bucket_view`` alone cannot avoid copies" in doc
    assert inspect.signature(torch.optim.Optimizer.zero_grad).parameters[
        "set_to_none"].default is True
