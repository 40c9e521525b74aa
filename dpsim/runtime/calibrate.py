"""Calibrate a Device from short timed runs on this machine's CPU or GPU.

Every timing is warmed up (`WARMUP` untimed calls) and then repeated; the calibration keeps
the *fastest* repeat. Other programs on a shared machine only ever add time, so the minimum
is the repeat they disturbed least, and a calibration run while the machine is busy still
describes the machine rather than its load (the median would include the load).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch

from dpsim.hardware import Device, cpu_device
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.device import synchronize
from dpsim.runtime.machine import gpu_device
from dpsim.validation import require_int


WARMUP = 3  # untimed calls before the timed repeats (allocator, caches, lazy init)


def _min_time_s(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Seconds of the fastest of `repeats` timed calls of `fn`, after `WARMUP` untimed ones."""
    for _ in range(WARMUP):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_matmul_tflops(device: torch.device, n: int = 512, repeats: int = 15) -> float:
    """Achieved fp32 TFLOP/s of an n x n matmul."""
    require_int("n", n, 16, 16384)
    a = torch.randn(n, n, device=device)
    bmat = torch.randn(n, n, device=device)
    t = _min_time_s(lambda: a @ bmat, device, repeats)
    return 2 * n**3 / t / 1e12


def measure_memory_GBps(device: torch.device, nbytes: int = 64 << 20, repeats: int = 15
                        ) -> float:
    """Achieved copy bandwidth (bytes read + written per second), GB/s."""
    src = torch.empty(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    t = _min_time_s(lambda: dst.copy_(src), device, repeats)
    return 2 * nbytes / t / 1e9


def measure_op_overhead_us(device: torch.device, depth: int = 4, repeats: int = 60) -> float:
    """Microseconds per operator, from a training step of a tiny model (compute ~ 0).

    The step of a `depth`-layer MLP of width 4 is timed and divided by the number of
    operators dpsim.compute charges for it, so the calibration and the model agree.
    """
    from dpsim.compute import step_compute_s
    from dpsim.runtime.models import mlp
    from dpsim.runtime.optimizers import build_optimizer

    model = mlp(4, 4, depth, 4).to(device)
    opt = build_optimizer("adam", model.parameters())
    x = torch.randn(2, 4, device=device)
    y = torch.zeros(2, dtype=torch.long, device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    measured = _min_time_s(step, device, repeats)
    workload = workload_from_module(model, x)
    unit = Device("unit", "cpu", 1.0, 1e9, 1e9, 1e12, op_overhead_us=1.0, efficiency=1.0)
    return measured / step_compute_s(workload, 2, unit)


def calibrate_device(device: torch.device | str = "cpu", quick: bool = True) -> Device:
    """This machine's CPU or GPU with measured peak (efficiency 1.0), bandwidth and overhead."""
    dev = torch.device(device)
    base = gpu_device(dev.index or 0) if dev.type == "cuda" else cpu_device(torch.get_num_threads())
    # quick: short timings (about a millisecond each), so that on a busy machine some
    # repeats run undisturbed; a 256 x 256 matmul is also the size of a small model's layers
    n = 256 if quick else 2048
    tflops = measure_matmul_tflops(dev, n, repeats=40 if quick else 15)
    bw = measure_memory_GBps(dev, (4 << 20) if quick else (256 << 20), 40 if quick else 15)
    overhead = measure_op_overhead_us(dev)
    return replace(base, name=f"{base.name} (calibrated)", fp32_tflops=tflops,
                   bf16_tflops=max(tflops, base.bf16_tflops if dev.type == "cuda" else tflops),
                   mem_bw_GBps=bw, op_overhead_us=overhead, efficiency=1.0)
