"""What torch 2.13 offers for timing each DDP bucket's all-reduce on gloo, and what it lacks.

`DDPRecorder` times each bucket with a Python comm hook, which costs about what torch's own
`allreduce_hook` costs (benchmarks/ddp_overhead.py measures both). These tests pin down why
no cheaper path is used on gloo; when one fails, torch has gained that path and the recorder
can drop its Python hook on gloo (as it could on NCCL, which has the completion hook).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from dpsim.runtime.launch import launch


def _probe(rank: int, world_size: int) -> dict[str, Any]:
    """On a gloo rank: try each per-operation timing torch exposes, and a bare future hook."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    found: dict[str, Any] = {}
    group: Any = dist.group.WORLD
    try:
        group._register_on_completion_hook(lambda info: None)
        found["completion_hook"] = "accepted"
    except RuntimeError as e:
        found["completion_hook"] = str(e)
    work = dist.all_reduce(torch.ones(4), async_op=True)
    work.wait()
    try:
        found["duration"] = work._get_duration()
    except RuntimeError as e:
        found["duration"] = str(e)

    def bare(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer().div_(world_size)
        return group.allreduce([buffer]).get_future()  # value: a list of tensors

    bare.__annotations__.update(bucket=dist.GradBucket, state=object,
                                **{"return": torch.futures.Future[torch.Tensor]})
    ddp = DDP(torch.nn.Linear(4, 2))
    ddp.register_comm_hook(None, bare)
    try:
        ddp(torch.ones(3, 4)).sum().backward()
        found["bare_future"] = "accepted"
    except RuntimeError as e:
        found["bare_future"] = str(e)
    return found


@pytest.fixture(scope="module")
def probed() -> dict[str, Any]:
    return launch(_probe, 2, backend="gloo", timeout_s=60)[0]


@pytest.mark.slow
def test_gloo_has_no_completion_hook(probed: dict[str, Any]) -> None:
    assert "NCCL" in probed["completion_hook"], probed["completion_hook"]


@pytest.mark.slow
def test_gloo_work_has_no_duration(probed: dict[str, Any]) -> None:
    assert "getDuration" in str(probed["duration"]), probed["duration"]


@pytest.mark.slow
def test_a_python_comm_hook_must_chain_a_python_callback(probed: dict[str, Any]) -> None:
    """DDP takes only a Python object as a Python hook's result: the collective's own
    future (a list of tensors) is refused, so every hook pays a `.then` callback."""
    assert "PyObject" in probed["bare_future"], probed["bare_future"]
