"""Which `torch.distributed` backend runs a group: the one rule `launch` and torchrun share."""

from __future__ import annotations

from dpsim.sim import require_choice

__all__ = ["BACKENDS", "choose_backend"]

BACKENDS = ("auto", "gloo", "nccl")


def choose_backend(requested: str, local_world_size: int, *, check: bool = True) -> str:
    """Turn "auto" into "nccl" (one CUDA GPU per local rank, NCCL built in) or "gloo".

    `local_world_size`: ranks on this machine. With `check`, an explicit "nccl" that this
    machine cannot run raises ValueError naming the fix; without it, "nccl" is returned
    as asked (torch's own error comes when the group starts). torch is imported on use.
    """
    require_choice("backend", requested, BACKENDS)
    import torch
    import torch.distributed as dist

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = dist.is_nccl_available()
    if requested == "auto":
        return "nccl" if nccl and gpus >= local_world_size else "gloo"
    if check and requested == "nccl" and not (nccl and gpus >= local_world_size):
        raise ValueError(
            f"backend='nccl' needs one CUDA GPU per rank (world_size={local_world_size}) and "
            f"a torch built with NCCL; found {gpus} GPU(s), NCCL available: {nccl}. "
            "Use backend='gloo' (runs on CPU) or backend='auto'."
        )
    return requested
