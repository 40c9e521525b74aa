"""One DataParallel step where this machine can run it: `run_step` runs the real
`nn.DataParallel` (`dpsim.runtime.dp_cuda_step.cuda_step`) where this machine has the GPUs,
and the CPU re-enactment (`dp_reenact`) where it has not.
"""

from __future__ import annotations

import torch
from torch import nn

from dpsim.labs.ch03_data_parallel.dp_reenact import reenact_step
from dpsim.runtime.dp_cuda_step import cuda_step
from dpsim.runtime.dp_step import DPStepResult, LossFn
from dpsim.sim import require_int

MIN_GPUS = 2  # "auto" runs the real nn.DataParallel from this many GPUs on (the doctor agrees)


def real_device_ids(n_devices: int, gpus: int, *, force: bool = False) -> list[int]:
    """The CUDA devices the real nn.DataParallel runs on: [] means the CPU re-enactment.

    With `gpus` >= MIN_GPUS (or `force` and at least one GPU): the first min(n_devices,
    gpus) GPUs; otherwise none.
    """
    require_int("n_devices", n_devices, 1, 64)
    require_int("gpus", gpus, 0, 1 << 16)
    if gpus >= MIN_GPUS or (force and gpus >= 1):
        return list(range(min(n_devices, gpus)))
    return []


def run_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, n_devices: int, *,
             optimizer: torch.optim.Optimizer | None = None, mode: str = "auto",
             warmup: int = 1, loss_fn: LossFn = nn.functional.cross_entropy) -> DPStepResult:
    """`warmup` + 1 training steps (zero_grad first); the result of the last one.

    mode "auto": the real nn.DataParallel on min(n_devices, GPUs) devices when this machine
    has at least MIN_GPUS (2) GPUs, else the CPU re-enactment on n_devices virtual devices;
    "cuda" forces the real one (with 1 GPU: device_ids=[0]); "cpu" forces the re-enactment.
    The module and batch move to the device that runs them.
    """
    require_int("n_devices", n_devices, 1, 64)
    require_int("warmup", warmup, 0, 100)
    if mode not in ("auto", "cpu", "cuda"):
        raise ValueError(f"mode={mode!r} is not known; allowed: 'auto', 'cpu', 'cuda'")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if mode == "cuda" and gpus < 1:
        raise ValueError("mode='cuda' needs a CUDA GPU; this machine has none (use 'cpu')")
    ids = real_device_ids(n_devices, gpus, force=mode == "cuda") if mode != "cpu" else []
    real = bool(ids)
    if real:
        module.to(f"cuda:{ids[0]}")
        x, y = x.to(f"cuda:{ids[0]}"), y.to(f"cuda:{ids[0]}")
    result = None
    for _ in range(warmup + 1):
        module.zero_grad(set_to_none=True)
        result = (cuda_step(module, x, y, ids, optimizer=optimizer, loss_fn=loss_fn) if real
                  else reenact_step(module, x, y, n_devices, optimizer=optimizer,
                                    loss_fn=loss_fn))
    assert result is not None
    return result
