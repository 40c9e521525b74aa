"""CPU stand-ins for torch.nn.parallel's scatter, replicate, parallel_apply and gather.

Chapter 3 (notebooks/03_data_parallel.ipynb) writes a DataParallel step by hand with
`torch.nn.parallel`'s four functions; they need CUDA tensors. On a machine without two GPUs
the same step runs with these stand-ins, which keep torch's signatures and semantics on
*virtual devices* of one CPU (what they produce is re-enacted, never a GPU measurement):

* `scatter`: `torch.chunk` along `dim`; every chunk after the first is a copy (sent away);
* `replicate`: replica 0 shares the module's parameters and buffers (torch guarantees this
  for device_ids[0]); the others get differentiable parameter copies, so backward sums their
  gradients into the module's `.grad`, and buffer copies, whose updates are lost;
* `parallel_apply`: one Python thread per replica;
* `gather`: `torch.cat` along `dim` (on "device 0": the CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from dpsim.labs.ch03_data_parallel.dp_reenact import replicate_module, run_threads
from dpsim.sim import require_int


def _check_devices(devices: Sequence[int]) -> int:
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(f"devices={devices!r} is not a non-empty list of device indices; "
                         "allowed: e.g. [0, 1, 2, 3]")
    return len(devices)


def scatter(inputs: torch.Tensor, target_devices: Sequence[int], dim: int = 0
            ) -> tuple[torch.Tensor, ...]:
    """`inputs` cut with torch.chunk into at most len(target_devices) chunks along `dim`."""
    n = _check_devices(target_devices)
    require_int("dim", dim, -inputs.dim(), inputs.dim() - 1)
    chunks = inputs.chunk(n, dim)
    return tuple(c if i == 0 else c.clone() for i, c in enumerate(chunks))


def replicate(network: nn.Module, devices: Sequence[int]) -> list[nn.Module]:
    """One replica of `network` per device; replica 0 shares its parameters and buffers."""
    n = _check_devices(devices)
    params: list[torch.Tensor] = list(network.parameters())
    replicas = []
    for i in range(n):
        replica = replicate_module(network, params if i == 0 else [p.clone() for p in params])
        if i > 0:  # torch broadcasts buffers: other devices update their own copies
            for m in replica.modules():
                for key, buf in m._buffers.items():
                    if buf is not None:
                        m._buffers[key] = buf.clone()
        replicas.append(replica)
    return replicas


def parallel_apply(modules: Sequence[nn.Module], inputs: Sequence[Any]) -> list[Any]:
    """modules[i](inputs[i]), one Python thread each (one intra-op thread per thread)."""
    if len(modules) != len(inputs):
        raise ValueError(f"len(modules)={len(modules)} and len(inputs)={len(inputs)} differ; "
                         "allowed: one input per replica")
    outputs: list[Any] = [None] * len(modules)
    grad_enabled = torch.is_grad_enabled()

    def run(i: int) -> None:
        with torch.set_grad_enabled(grad_enabled):  # autograd mode is per thread
            args = inputs[i] if isinstance(inputs[i], (list, tuple)) else (inputs[i],)
            outputs[i] = modules[i](*args)

    run_threads([functools.partial(run, i) for i in range(len(modules))])
    return outputs


def gather(outputs: Sequence[torch.Tensor], target_device: int = 0, dim: int = 0
           ) -> torch.Tensor:
    """The outputs concatenated along `dim` (on the CPU, standing for `target_device`)."""
    require_int("target_device", target_device, -1)
    return torch.cat(list(outputs), dim)
