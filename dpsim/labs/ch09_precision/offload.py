"""FSDP2's CPUOffloadPolicy on gloo: what runs on a CPU mesh and what cannot.

On a CPU-only machine the parameters already live in host memory, so offloading moves
nothing; `CPUOffloadPolicy(pin_memory=False)` runs (the step must equal the plain one),
and the default `pin_memory=True` needs an accelerator (the error is reported, not hidden).
The bytes it would take off a GPU are simulated (`precision.offloaded`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dpsim.runtime.models.tiny_transformer import tiny_transformer, token_batch


def offload_rank(rank: int, world_size: int, batch: int = 4, seed: int = 0) -> dict[str, Any]:
    """On each rank: one FSDP2 step with and without CPUOffloadPolicy(pin_memory=False)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    mesh = init_device_mesh("cpu", (world_size,))
    x, y = token_batch(batch * world_size, seed)
    xs, ys = x.chunk(world_size)[rank].clone(), y.chunk(world_size)[rank].clone()
    out: dict[str, Any] = {}
    params = {}
    for kind, policy in (("plain", OffloadPolicy()),
                         ("offload", CPUOffloadPolicy(pin_memory=False))):
        model = tiny_transformer(seed)
        for block in model.blocks:
            fully_shard(block, mesh=mesh, offload_policy=policy)
        fully_shard(model, mesh=mesh, offload_policy=policy)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
        nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()
        params[kind] = {n: p.detach().full_tensor()  # type: ignore[attr-defined]
                        for n, p in model.named_parameters()}
        devices = {str(p.to_local().device) for p in model.parameters()}  # type: ignore
        devices |= {str(v.device) for s in opt.state.values() for v in s.values()}
        out[f"{kind}_devices"] = sorted(devices)
    out["max_param_diff"] = max(float((params["offload"][n] - p).abs().max())
                                for n, p in params["plain"].items())
    try:
        fully_shard(tiny_transformer(seed), mesh=mesh, offload_policy=CPUOffloadPolicy())
        out["pinned"] = "ran"
    except RuntimeError as err:  # no accelerator to pin host memory for
        out["pinned"] = f"RuntimeError: {err}"
    return out
