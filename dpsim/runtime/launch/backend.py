"""Which `torch.distributed` backend runs a group: the one rule `launch` and torchrun share.

The backend follows the device the ranks keep their tensors on: NCCL serves CUDA tensors
only (a CPU tensor in an NCCL collective raises "No backend type associated with device
type cpu"), gloo serves CPU tensors. So "auto" is decided here, once, from two facts: the
GPUs this machine has, and whether the rank function works on CPU tensors (`device="cpu"`:
gloo, however many GPUs there are) or follows the group (`device="auto"`: the function
reads its device from `dist.get_backend()`, cuda:<local rank> under NCCL).
"""

from __future__ import annotations

from dpsim.sim import require_choice

__all__ = ["BACKENDS", "DEVICES", "choose_backend"]

BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu")


def choose_backend(requested: str, local_world_size: int, *, device: str = "auto",
                   check: bool = True) -> str:
    """Turn "auto" into "nccl" (one CUDA GPU per local rank, NCCL built in) or "gloo".

    `local_world_size`: ranks on this machine. `device`: "cpu" when the ranks' tensors
    stay on the CPU, so "auto" is "gloo" even where there are GPUs (and "nccl" is refused);
    "auto" when they follow the backend. With `check`, an explicit "nccl" that this
    machine cannot run raises ValueError naming the fix; without it, "nccl" is returned
    as asked (torch's own error comes when the group starts). torch is imported on use.
    """
    require_choice("backend", requested, BACKENDS)
    require_choice("device", device, DEVICES)
    if device == "cpu":
        if requested == "nccl":
            raise ValueError(
                "backend='nccl' with device='cpu' is not allowed: NCCL serves CUDA tensors "
                "only. Use backend='gloo' or 'auto' (gloo for CPU tensors)."
            )
        return "gloo"
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
