"""Devices: one accelerator (or a CPU socket used as one), its presets and how to find one.

Peak numbers are vendor datasheet figures (dense, no sparsity), each sourced in
`dpsim.sim.hardware.gpu_specs`. `efficiency` is the fraction of peak a well-tuned training
step reaches; `dpsim.runtime.device_calibration.calibrate_device` measures this machine's
device, folding what a training step reaches into the peaks (efficiency 1.0).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from typing import Annotated

from dpsim.sim.checks import Int, OneOf, Real, check_fields
from dpsim.sim.hardware.gpu_specs import SPECS, match_name
from dpsim.sim.limits import (
    MAX_CORES,
    MAX_MEMORY_GIB,
    MIN_EFFICIENCY,
    GiB,
    Microseconds,
    Rate,
)


@dataclass(frozen=True)
class Device:
    """One accelerator (or a CPU socket used as one)."""

    name: str
    kind: Annotated[str, OneOf(("gpu", "cpu"))]  # "gpu" or "cpu"
    memory_GiB: Annotated[float, Real(0, MAX_MEMORY_GIB, low_inclusive=False)]  # usable
    # device memory
    fp32_tflops: Rate  # dense fp32 peak (TF32 off)
    bf16_tflops: Rate  # dense bf16/fp16 peak (tensor cores on GPUs)
    mem_bw_GBps: Rate  # device memory bandwidth, GB/s
    op_overhead_us: Microseconds = 10.0  # fixed cost per operator: Python dispatch + kernel launch
    # fraction of peak FLOP/s reached by large matmuls
    efficiency: Annotated[float, Real(MIN_EFFICIENCY, 1)] = 0.6

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def memory_bytes(self) -> int:
        """Usable memory in bytes."""
        return int(self.memory_GiB * GiB)

    def tflops(self, dtype: Annotated[str, OneOf(("fp32", "bf16", "fp16"))]) -> float:
        """Peak dense TFLOP/s for `dtype` ("fp32", "bf16" or "fp16"); called per layer, so it
        checks inline."""
        if type(dtype) is str and dtype in ("fp32", "bf16", "fp16"):
            return self.fp32_tflops if dtype == "fp32" else self.bf16_tflops
        raise ValueError(f"dtype={dtype!r} is not known; allowed: 'fp32', 'bf16', 'fp16'")


# --- presets ------------------------------------------------------------------------------


def _device(key: str, op_overhead_us: float = 5.0) -> Device:
    spec = SPECS[key]
    return Device(spec.label, "gpu", spec.memory_GiB, spec.fp32_tflops, spec.bf16_tflops,
                  spec.mem_bw_GBps, op_overhead_us=op_overhead_us)


A100_40GB = _device("a100-40gb", op_overhead_us=6.0)
A100_80GB = _device("a100-80gb", op_overhead_us=6.0)
H100_80GB = _device("h100-80gb")
H100_PCIE = _device("h100-pcie")
H200 = _device("h200")
B200 = _device("b200")
L4 = _device("l4")
T4 = _device("t4", op_overhead_us=8.0)
A10 = _device("a10")
A10G = _device("a10g")
RTX_3070 = _device("rtx-3070")
RTX_3080 = _device("rtx-3080")
RTX_3090 = _device("rtx-3090")
RTX_4080 = _device("rtx-4080")
RTX_4090 = _device("rtx-4090")
V100_32GB = _device("v100-32gb", op_overhead_us=8.0)
MI300X = _device("mi300x")
LAPTOP_CPU = Device("laptop CPU", "cpu", 16.0, 0.5, 0.5, 40.0, op_overhead_us=15.0)

DEVICES: dict[str, Device] = {
    "a100-40gb": A100_40GB,
    "a100-80gb": A100_80GB,
    "h100-80gb": H100_80GB,
    "h100-pcie": H100_PCIE,
    "h200": H200,
    "b200": B200,
    "l4": L4,
    "t4": T4,
    "a10": A10,
    "a10g": A10G,
    "rtx-3070": RTX_3070,
    "rtx-3080": RTX_3080,
    "rtx-3090": RTX_3090,
    "rtx-4080": RTX_4080,
    "rtx-4090": RTX_4090,
    "v100-32gb": V100_32GB,
    "mi300x": MI300X,
    "laptop-cpu": LAPTOP_CPU,
}


def get_device(name: Annotated[str, OneOf((*DEVICES, "this-cpu"))]) -> Device:
    """A device preset by name (see DEVICES), or "this-cpu" for this machine's CPU."""
    if name == "this-cpu":
        return cpu_device()
    return DEVICES[name]


def device_for_name(cuda_name: str,
                    memory_bytes: Annotated[int, Int(GiB // 128, MAX_MEMORY_GIB * GiB)],
                    warn: bool = True) -> Device:
    """The preset a CUDA device name identifies (`gpu_specs.match_name`), with the real
    memory size (bytes; from 8 MiB, kept to 0.01 GiB). An unknown name gets A100 80GB peaks
    and a warning, never silently; so does a name whose preset is a stand-in (an A10G takes
    the A10's datasheet rates)."""
    key = match_name(cuda_name)
    memory = round(memory_bytes / GiB, 2)
    if key is None:
        if warn:
            warnings.warn(f"GPU {cuda_name!r} is not among dpsim's presets ({', '.join(SPECS)}"
                          "); its peaks are taken from the A100 80GB SXM: give a Device for "
                          "better numbers", stacklevel=2)
        return replace(A100_80GB, name=cuda_name, memory_GiB=memory)
    preset = DEVICES[key]
    if warn and key == "a10g":
        warnings.warn(f"GPU {cuda_name!r}: {SPECS[key].note}", stacklevel=2)
    return replace(preset, name=cuda_name, memory_GiB=memory)


def cpu_device(n_cores: Annotated[int, Int(1, MAX_CORES)] | None = None) -> Device:
    """This machine's CPU with nominal (uncalibrated) throughput: ~50 GFLOP/s fp32 per core.

    `n_cores` (1..MAX_CORES) overrides the number of cores; None counts this machine's.
    """
    cores = n_cores or os.cpu_count() or 1
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    except (ValueError, OSError, AttributeError):
        mem = 8.0
    return Device(f"CPU ({cores} cores)", "cpu", round(mem, 1), 0.05 * cores, 0.05 * cores,
                  20.0, op_overhead_us=15.0)
