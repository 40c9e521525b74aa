"""One recorded DataParallel step, however it ran: its result, batch check, clock and finish.

On CPU the step is re-enacted (trace source "re-enacted"); on CUDA it is measured.

Shared by chapter 3's CPU re-enactment (`labs.ch03_data_parallel.dp_reenact`) and the real
`nn.DataParallel` (`dp_cuda_step`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from dpsim.sim import Trace, require_int

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class DPStepResult:
    """One recorded DataParallel step (trace.source: "re-enacted" on CPU, "measured" on CUDA)."""

    trace: Trace  # phases per device, memory per device
    chunk_sizes: list[int]  # samples each used device got
    loss: float
    how: str  # where and how it ran
    gradients: dict[str, torch.Tensor] = field(default_factory=dict)  # device 0's .grad (CPU)


def check_batch(x: torch.Tensor, n_devices: int) -> int:
    """The batch size of `x` (samples), after checking it and `n_devices`."""
    require_int("n_devices", n_devices, 1, 64)
    if x.dim() == 0 or x.shape[0] < 1:
        raise ValueError(f"batch_size={0 if x.dim() == 0 else x.shape[0]} is out of range; "
                         "allowed >= 1 (give a batch with at least one sample)")
    return int(x.shape[0])


class Clock:
    """Seconds since the step began."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def now(self) -> float:
        """Seconds since this clock was made."""
        return time.perf_counter() - self.t0


def step_result(module: nn.Module, tr: Trace, sizes: list[int], loss: torch.Tensor,
                how: str) -> DPStepResult:
    """Finish a step: chunk sizes, step time and peak bytes per device into the trace meta."""
    tr.meta.update({"chunk_sizes": sizes, "n_devices_used": len(sizes), "how": how,
                    "step_time_s": tr.end_s})
    tr.meta["peak_bytes"] = [tr.peak_memory(d) for d in range(tr.meta["n_devices"])]
    grads = {n: p.grad.detach().cpu().clone() for n, p in module.named_parameters()
             if p.grad is not None}
    return DPStepResult(tr, sizes, float(loss.detach()), how, grads)
