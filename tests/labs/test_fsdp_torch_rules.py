"""What chapter 6 teaches about FSDP2 and torch's ZeRO-1, pinned against the installed torch.

Each test reads torch's source or runs `fully_shard` on a one-rank gloo mesh in this
process, so it fails when torch changes the behaviour notebooks/06_fsdp.ipynb states.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

TORCH = Path(torch.__file__).parent


def test_reduce_dtype_none_reduces_in_param_dtype() -> None:
    api = (TORCH / "distributed/fsdp/_fully_shard/_fsdp_api.py").read_text()
    text = " ".join(api.split())
    assert ("If this is ``None`` but ``param_dtype`` is not ``None``, then the reduction uses "
            "the compute dtype.") in text
    from torch.distributed.fsdp import MixedPrecisionPolicy

    assert MixedPrecisionPolicy().reduce_dtype is None


def test_fully_shard_swaps_the_class(group: None) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    fully_shard(model[0], mesh=init_device_mesh("cpu", (1,)))
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    assert type(model).__name__ == "FSDPSequential"
    assert type(model[0]).__name__ == "FSDPLinear"
    assert isinstance(model, nn.Sequential)
    assert isinstance(model, FSDPModule)
    weight: Any = model[0].weight  # a DTensor
    assert weight.full_tensor().shape == weight.to_local().shape == (6, 4)


def test_fsdp2_prefetches_implicitly_and_explicitly() -> None:
    from torch.distributed.fsdp import FSDPModule

    for name in ("set_modules_to_forward_prefetch", "set_modules_to_backward_prefetch",
                 "set_requires_gradient_sync"):
        assert callable(getattr(FSDPModule, name))
    group_src = (TORCH / "distributed/fsdp/_fully_shard/_fsdp_param_group.py").read_text()
    assert "For implicit forward prefetching" in group_src
    assert "def _backward_prefetch" in group_src  # the default backward prefetch


def test_zero_redundancy_optimizer_broadcasts_every_parameter() -> None:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    step = inspect.getsource(ZeroRedundancyOptimizer.step)
    assert "self._sync_params()" in step
    zero: Any = ZeroRedundancyOptimizer
    broadcast = inspect.getsource(zero._broadcast_params_from_rank)
    assert "dist.broadcast(" in broadcast
    sync = inspect.getsource(zero._sync_params)
    assert "_broadcast_params_from_rank" in sync
