"""Mixed precision measured: torch.autocast in one process.

Bytes come from real tensors: parameters, gradients and optimizer state by storage
(`measure.model_state_breakdown`), activations as the bytes autograd saves for backward
(`measure.saved_tensors`, parameters excluded; under autocast the 16-bit copies of the
weights that matmuls save count here, as they are not the parameters). dpsim's prediction
(`precision.policy_model_state_bytes`) is exact for model states.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dpsim.runtime.measure import model_state_breakdown, saved_tensors
from dpsim.runtime.models.tiny_transformer import tiny_transformer, token_batch
from dpsim.sim import (
    LOW_DTYPES,
    MemoryBreakdown,
    policy_model_state_bytes,
    precision_policy,
    require_choice,
    require_int,
)

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DEVICES = ("cpu", "cuda")


@dataclass
class PrecisionStep:
    """One measured training step under a precision, next to dpsim's model-state prediction."""

    label: str  # e.g. "autocast bf16 (cpu)"
    measured: MemoryBreakdown  # activations = bytes autograd saved for backward
    predicted: MemoryBreakdown  # model states only (activations 0: not predicted here)
    zero_scheme: MemoryBreakdown  # what ZeRO's 2 + 2 + 12 scheme would keep instead
    dtypes: dict[str, str]  # dtype of parameters, gradients, optimizer moments, logits
    losses: list[float]

    @property
    def states_exact(self) -> bool:
        """True when measured parameters, gradients and optimizer bytes equal the prediction."""
        m, p = self.measured, self.predicted
        return (m.parameters, m.gradients, m.optimizer) == (p.parameters, p.gradients,
                                                           p.optimizer)


def _dtypes(model: nn.Module, opt: torch.optim.Optimizer, logits: torch.Tensor
            ) -> dict[str, str]:
    p = next(iter(model.parameters()))
    moments = [v for s in opt.state.values() for k, v in s.items() if k != "step"]
    return {"parameters": str(p.dtype), "gradients": str(p.grad.dtype) if p.grad is not None
            else "none", "optimizer": str(moments[0].dtype) if moments else "none",
            "logits": str(logits.dtype)}


def autocast_step(dtype: str = "bf16", device: str = "cpu", steps: int = 2, batch: int = 8,
                  seed: int = 0) -> PrecisionStep:
    """Train the tiny transformer `steps` steps under torch.autocast(`device`, `dtype`) with
    Adam (fp16 with a GradScaler; "fp32" turns autocast off); measure the last step."""
    require_choice("dtype", dtype, (*LOW_DTYPES, "fp32"))
    require_choice("device", device, DEVICES)
    require_int("steps", steps, 1, 1000)
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a CUDA GPU; allowed here: 'cpu'")
    model = tiny_transformer(seed).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    scaler = torch.amp.GradScaler(device, enabled=dtype == "fp16")
    x, y = token_batch(batch, seed)
    x, y = x.to(device), y.to(device)
    losses: list[float] = []
    saved_bytes = 0
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with saved_tensors(model.parameters()) as saved, torch.autocast(
                device, TORCH_DTYPES[dtype] if dtype != "fp32" else torch.bfloat16,
                enabled=dtype != "fp32"):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
        saved_bytes = saved.nbytes
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    states = model_state_breakdown(model, opt)
    n, t = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    name = "fp32" if dtype == "fp32" else "torch_amp"
    low = "bf16" if dtype == "fp32" else dtype
    return PrecisionStep(
        f"{'fp32' if dtype == 'fp32' else 'autocast ' + dtype} ({device})",
        MemoryBreakdown(states.parameters, states.gradients, states.optimizer, saved_bytes),
        policy_model_state_bytes(n, t, precision_policy(name, low)),
        policy_model_state_bytes(n, t, precision_policy("zero_mixed", low)),
        _dtypes(model, opt, logits), losses)
