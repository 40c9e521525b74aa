"""Build a Workload from one forward pass of a real nn.Module (rules in workload.SAVES)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from dpsim.sim import SAVES, Layer, Workload


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _first_tensor(x: Any) -> torch.Tensor | None:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)):
        for item in x:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _key(t: torch.Tensor) -> tuple[int, int, tuple[int, ...]]:
    return (t.untyped_storage().data_ptr(), int(t.storage_offset()), tuple(t.shape))


def workload_from_module(module: nn.Module, example_input: Any,
                         loss: str = "cross_entropy") -> Workload:
    """Run `module(example_input)` once and describe every leaf layer per sample."""
    x = _first_tensor(example_input)
    if x is None or x.dim() == 0 or x.shape[0] < 1:
        raise ValueError("example_input must be a tensor (or tuple) with a batch dimension >= 1")
    batch = int(x.shape[0])
    param_ptrs = {p.untyped_storage().data_ptr() for p in module.parameters()}
    counted: set[tuple[int, int, tuple[int, ...]]] = set()
    alive: list[torch.Tensor] = []  # keep counted tensors alive so addresses are not reused
    records: list[dict[str, Any]] = []

    def saved_bytes(kind: str, inp: Any, out: Any) -> int:
        rule = SAVES.get(kind, "input")
        if rule == "nothing":
            return 0
        if rule == "mask":
            t = _first_tensor(out)
            return 0 if t is None or not module.training else t.numel()
        if rule == "indices":
            t = _first_tensor(inp)
            return _nbytes(t)
        t = _first_tensor(inp if rule == "input" else out)
        if t is None or t.untyped_storage().data_ptr() in param_ptrs:
            return 0
        key = _key(t)
        if key in counted:
            return 0
        counted.add(key)
        alive.append(t)
        extra = 0
        if kind == "MaxPool2d":
            extra = _first_tensor(out).numel() * 8  # type: ignore[union-attr]
        return _nbytes(t) + extra

    def hook(mod: nn.Module, inp: Any, out: Any) -> None:
        kind = type(mod).__name__
        own = list(mod.parameters(recurse=False))
        out_t = _first_tensor(out)
        records.append({
            "name": names[mod], "kind": kind,
            "n_params": sum(p.numel() for p in own), "n_param_tensors": len(own),
            "act": saved_bytes(kind, inp, out), "out": _nbytes(out_t),
        })

    names = {m: n for n, m in module.named_modules()}
    leaves = [m for m in module.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            module(*example_input) if isinstance(example_input, tuple) else module(example_input)
    finally:
        for h in handles:
            h.remove()
    flops = _flops_by_module(counter, type(module).__name__)
    layers = tuple(
        Layer(
            name=r["name"], kind=r["kind"], n_params=r["n_params"],
            n_param_tensors=r["n_param_tensors"], activation_bytes=r["act"] // batch,
            output_bytes=r["out"] // batch, flops=flops.get(r["name"], 0.0) / batch,
        )
        for r in records
    )
    # parameters owned by non-leaf modules (rare) are attributed to an extra entry
    leaf_params = sum(layer.n_params for layer in layers)
    total = sum(p.numel() for p in module.parameters())
    if total != leaf_params:
        n_t = len(list(module.parameters())) - sum(layer.n_param_tensors for layer in layers)
        extra = Layer("(non-leaf parameters)", "Parameter", total - leaf_params, n_t, 0, 0, 0.0)
        layers += (extra,)
    out_bytes = layers[-1].output_bytes if layers else 0
    loss_bytes = out_bytes + 8 if loss == "cross_entropy" else 0  # log-softmax + int64 target
    dtype = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(
        next((p.dtype for p in module.parameters()), torch.float32), "fp32")
    return Workload(type(module).__name__, layers, dtype=dtype, input_bytes=_nbytes(x) // batch,
                    loss_bytes=loss_bytes, meta={"captured_batch": batch, "loss": loss})


def _flops_by_module(counter: FlopCounterMode, root: str) -> dict[str, float]:
    """Forward FLOPs per module name ('' prefix of the root class removed)."""
    out: dict[str, float] = {}
    for key, ops in counter.get_flop_counts().items():
        if key == "Global":
            continue
        name = key[len(root) + 1:] if key.startswith(root + ".") else ("" if key == root else key)
        out[name] = float(sum(ops.values()))
    return out
