"""How long a layer takes on a device: a roofline with a fixed cost per operator.

time = max(FLOPs / (peak * efficiency), bytes moved / memory bandwidth) + ops * overhead.
Backward does twice the forward FLOPs. Strategies share these functions so that every
simulated timeline uses the same compute model.
"""

from __future__ import annotations

from dpsim.sim.cost.memory import Dtype, Optimizer
from dpsim.sim.hardware import Device
from dpsim.sim.limits import Count
from dpsim.sim.workload import DTYPE_BYTES, Layer, Workload

OPS_PER_LAYER = 1  # operators a leaf layer dispatches in forward (backward: 2x)


def _roofline_s(flops: float, nbytes: float, device: Device, dtype: str) -> float:
    compute = flops / (device.tflops(dtype) * 1e12 * device.efficiency)
    memory = nbytes / (device.mem_bw_GBps * 1e9)
    return max(compute, memory)


def forward_time_s(layer: Layer, batch_size: Count, device: Device, dtype: Dtype = "fp32",
                   captured_dtype: Dtype = "fp32") -> float:
    """Seconds for one layer's forward pass on a batch."""
    scale = DTYPE_BYTES[dtype] / DTYPE_BYTES[captured_dtype]
    nbytes = (layer.output_bytes + layer.activation_bytes) * batch_size * scale
    nbytes += layer.n_params * DTYPE_BYTES[dtype]
    ops = OPS_PER_LAYER if layer.flops or layer.output_bytes else 0
    return _roofline_s(layer.flops * batch_size, nbytes, device, dtype) + ops * (
        device.op_overhead_us * 1e-6)


def backward_time_s(layer: Layer, batch_size: Count, device: Device, dtype: Dtype = "fp32",
                    captured_dtype: Dtype = "fp32") -> float:
    """Seconds for one layer's backward pass: twice the forward's FLOPs and operators."""
    scale = DTYPE_BYTES[dtype] / DTYPE_BYTES[captured_dtype]
    nbytes = 2 * (layer.output_bytes + layer.activation_bytes) * batch_size * scale
    nbytes += 2 * layer.n_params * DTYPE_BYTES[dtype]
    ops = 2 * OPS_PER_LAYER if layer.flops or layer.output_bytes else 0
    return _roofline_s(2 * layer.flops * batch_size, nbytes, device, dtype) + ops * (
        device.op_overhead_us * 1e-6)


def optimizer_time_s(n_params: Count, n_param_tensors: Count, device: Device,
                     optimizer: Optimizer = "adam") -> float:
    """Seconds for an optimizer step: memory-bound reads and writes of every state (fp32)."""
    touched = {"sgd": 3, "sgd_momentum": 5, "adam": 9, "adamw": 9}[optimizer]  # words per param
    nbytes = touched * 4 * n_params
    per_tensor = {"sgd": 1, "sgd_momentum": 2, "adam": 6, "adamw": 7}[optimizer]
    return nbytes / (device.mem_bw_GBps * 1e9) + n_param_tensors * per_tensor * (
        device.op_overhead_us * 1e-6)


def step_compute_s(workload: Workload, batch_size: Count, device: Device, dtype: Dtype = "fp32",
                   optimizer: Optimizer = "adam") -> float:
    """Forward + backward + optimizer seconds for one training step on one device."""
    fwd = sum(forward_time_s(layer, batch_size, device, dtype, workload.dtype)
              for layer in workload.layers)
    bwd = sum(backward_time_s(layer, batch_size, device, dtype, workload.dtype)
              for layer in workload.layers)
    return fwd + bwd + optimizer_time_s(workload.n_params, workload.n_param_tensors, device,
                                        optimizer)
