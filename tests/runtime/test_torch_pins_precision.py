"""Pins of torch's mixed precision as chapters 7 and 9 teach it (FSDP2 on 2 gloo ranks).

FSDP2's `MixedPrecisionPolicy(param_dtype=torch.bfloat16)` leaves `reduce_dtype=None`, and
then reduces the gradients in `param_dtype`: bf16, not fp32
(torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: `reduce_dtype = reduce_dtype or
grad_dtype`, the gradient computed in bf16). fp32 reduction needs
`reduce_dtype=torch.float32`. Either way the sharded parameter and its gradient stay fp32,
so a rank keeps the bytes of torch's scheme (`precision_policy("torch_amp")`).
The observable: the dtype of every tensor FSDP2 hands to the reduce-scatter
(`dist.reduce_scatter_single` on torch 2.13, `dist.reduce_scatter_tensor` on 2.9).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
import torch
from torch import nn

from dpsim.runtime.fsdp_builders import (
    IN_FEATURES,
    N_CLASSES,
    fsdp_model,
    measure_shards,
    param_shapes,
)
from dpsim.runtime.launch import launch
from dpsim.sim import POLICY_SOURCES, PRECISION_SETTINGS, MemoryBreakdown, precision_policy
from dpsim.sim.cost.precision import fsdp_policy_rank_bytes

REDUCE_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor")  # torch 2.13 / 2.9


def test_mixed_precision_policy_defaults_to_no_reduce_dtype() -> None:
    """fully_shard's default policy casts nothing; reduce_dtype is None unless set."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    defaults = {f.name: f.default for f in dataclasses.fields(MixedPrecisionPolicy)}
    assert defaults["param_dtype"] is None
    assert defaults["reduce_dtype"] is None
    assert MixedPrecisionPolicy(param_dtype=torch.bfloat16).reduce_dtype is None
    assert inspect.signature(fully_shard).parameters["mp_policy"].default == \
        MixedPrecisionPolicy()


def test_the_labels_name_the_torch_setting() -> None:
    """The planner's torch_amp and the simulator's scheme name reduce_dtype=torch.float32."""
    for text in (PRECISION_SETTINGS["torch_amp"], POLICY_SOURCES["torch_amp"]):
        assert "MixedPrecisionPolicy(param_dtype=torch.bfloat16" in text
        assert "reduce_dtype=torch.float32" in text
    assert precision_policy("torch_amp").reduce_dtype == "fp32"
    assert precision_policy("torch_amp", reduce_dtype="bf16").reduce_dtype == "bf16"


def _reduced_dtypes(rank: int, world_size: int, reduce_dtype: torch.dtype | None
                    ) -> tuple[list[str], str, str, MemoryBreakdown]:
    """One FSDP2 step of the lab MLP in bf16; (dtypes reduce-scattered, sharded parameter
    dtype, its gradient's dtype, this rank's model-state bytes)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    seen: list[str] = []

    def watched(collective: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            seen.append(str((kwargs["input"] if "input" in kwargs else args[1]).dtype))
            return collective(*args, **kwargs)
        return wrapped

    for name in REDUCE_SCATTERS:
        if hasattr(dist, name):
            setattr(dist, name, watched(getattr(dist, name)))
    mesh = init_device_mesh("cpu", (world_size,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
    model = fsdp_model("mlp", seed=0)
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(4, IN_FEATURES, generator=g), torch.randint(0, N_CLASSES, (4,), generator=g)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    p = next(model.parameters())
    assert p.grad is not None
    return sorted(set(seen)), str(p.dtype), str(p.grad.dtype), measure_shards(model, opt, False)


@pytest.fixture(scope="module")
def runs() -> dict[str, list[Any]]:
    return {str(rd): launch(_reduced_dtypes, 2, args=(rd,), device="cpu", timeout_s=180.0)
            for rd in (None, torch.float32)}


@pytest.mark.slow
def test_default_reduce_dtype_reduces_in_bf16(runs: dict[str, list[Any]]) -> None:
    for rank in runs["None"]:
        reduced, shard, grad, _ = rank
        assert reduced == ["torch.bfloat16"]  # the reduce-scatter ran, in param_dtype
        assert (shard, grad) == ("torch.float32", "torch.float32")


@pytest.mark.slow
def test_reduce_dtype_fp32_reduces_in_fp32(runs: dict[str, list[Any]]) -> None:
    for rank in runs["torch.float32"]:
        reduced, shard, grad, _ = rank
        assert reduced == ["torch.float32"]
        assert (shard, grad) == ("torch.float32", "torch.float32")


@pytest.mark.slow
def test_rank_bytes_are_torchs_scheme_either_way(runs: dict[str, list[Any]]) -> None:
    """fp32 shards, gradients and moments: fsdp_policy_rank_bytes(torch_amp), byte for byte."""
    shapes = param_shapes(fsdp_model("mlp"))
    for key, rd in (("None", "bf16"), ("torch.float32", "fp32")):
        policy = precision_policy("torch_amp", reduce_dtype=rd)
        for rank, (_, _, _, measured) in enumerate(runs[key]):
            assert measured == fsdp_policy_rank_bytes(shapes, 2, rank, policy)
