"""Calibrate a Device from short timed runs on this machine's CPU or GPU.

Every timing is warmed up (`WARMUP` untimed calls) and then repeated; the calibration keeps
the *fastest* repeat. Other programs on a shared machine only ever add time, so the minimum
is the repeat they disturbed least, and a calibration run while the machine is busy still
describes the machine rather than its load (the median would include the load). With one
intra-op thread on a CPU (a DDP rank on a small machine) the repeats are timed in the
thread's CPU time (`cpu_clock`), which other programs do not add to at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch

from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.device import synchronize
from dpsim.runtime.machine import gpu_device
from dpsim.sim import Device, cpu_device, require_finite, require_int

WARMUP = 3  # untimed calls before the timed repeats (allocator, caches, lazy init)
ROUNDS = 3  # training steps are timed on this many freshly initialised models


Clock = Callable[[], float]


def cpu_clock(device: torch.device | str = "cpu") -> Clock:
    """The clock a calibration on `device` times with: seconds, increasing.

    On a CPU with one intra-op thread every operation runs on the calling thread, so that
    thread's CPU time (time.thread_time) is the operation's time, and the time other
    programs hold the core is not counted: a calibration run on a busy machine measures
    the machine. With more threads (or on a GPU) it is the wall clock, time.perf_counter.
    """
    if torch.device(device).type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def _min_time_s(fn: Callable[[], object], device: torch.device, repeats: int,
                clock: Clock = time.perf_counter) -> float:
    """Seconds of the fastest of `repeats` timed calls of `fn`, after `WARMUP` untimed ones."""
    for _ in range(WARMUP):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        synchronize(device)
        times.append(clock() - t0)
    return min(times)


def measure_matmul_tflops(device: torch.device, n: int = 512, repeats: int = 15,
                          clock: Clock = time.perf_counter) -> float:
    """Achieved fp32 TFLOP/s of an n x n matmul."""
    require_int("n", n, 16, 16384)
    a = torch.randn(n, n, device=device)
    bmat = torch.randn(n, n, device=device)
    t = _min_time_s(lambda: a @ bmat, device, repeats, clock)
    return 2 * n**3 / t / 1e12


def measure_memory_GBps(device: torch.device, nbytes: int = 64 << 20, repeats: int = 15,
                        clock: Clock = time.perf_counter) -> float:
    """Achieved copy bandwidth (bytes read + written per second), GB/s."""
    src = torch.empty(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    t = _min_time_s(lambda: dst.copy_(src), device, repeats, clock)
    return 2 * nbytes / t / 1e9


def _step_s(model: torch.nn.Module, x: torch.Tensor, device: torch.device, repeats: int,
            clock: Clock = time.perf_counter) -> float:
    """Fastest seconds of one Adam training step of `model` on the batch `x`."""
    from dpsim.runtime.optimizers import build_optimizer

    opt = build_optimizer("adam", model.parameters())
    y = torch.zeros(x.shape[0], dtype=torch.long, device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return _min_time_s(step, device, repeats, clock)


def _charged_s(model: torch.nn.Module, x: torch.Tensor, device: Device) -> float:
    """What dpsim.sim.cost.compute charges for one Adam step of `model` on `x` on `device`."""
    from dpsim.sim import step_compute_s

    return step_compute_s(workload_from_module(model, x), x.shape[0], device)


def measure_op_overhead_us(device: torch.device, depth: int = 4, repeats: int = 60,
                           clock: Clock = time.perf_counter) -> float:
    """Microseconds per operator, from a training step of a tiny model (compute ~ 0).

    The step of a `depth`-layer MLP of width 4 is timed and divided by the number of
    operators dpsim.sim.cost.compute charges for it, so the calibration and the model agree.
    """
    from dpsim.runtime.models import mlp

    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0)).to(device)
    unit = Device("unit", "cpu", 1.0, 1e9, 1e9, 1e12, op_overhead_us=1.0, efficiency=1.0)
    # several initialisations, fastest kept: a width-4 net can come out with every ReLU
    # dead, and then its loss's backward stalled for milliseconds on a busy 2-core machine
    # one intra-op thread: a tiny operator's cost is its dispatch, and waking a second
    # thread that another program holds stalled each step by milliseconds on a busy machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fastest = min(_step_s(mlp(4, 4, depth, 4, seed=seed).to(device), x, device,
                              repeats // ROUNDS, clock) for seed in range(ROUNDS))
    finally:
        torch.set_num_threads(threads)
    return fastest / _charged_s(mlp(4, 4, depth, 4), x, unit)


def step_scale(measured_s: float, overhead_s: float, roofline_s: float) -> float:
    """How much faster (> 1) or slower (< 1) than the roofline a real step's compute ran.

    `measured_s` is a step's time, `overhead_s` what the per-operator cost explains of it
    and `roofline_s` its FLOPs and bytes at the isolated matmul's and copy's speed, all
    in seconds. Clamped to [0.01, 100].
    """
    require_finite("measured_s", measured_s, 0, 1e6)
    require_finite("overhead_s", overhead_s, 0, 1e6)
    require_finite("roofline_s", roofline_s, 0, 1e6)
    compute_s = measured_s - overhead_s
    if roofline_s <= 0:
        return 1.0
    if compute_s <= 0:
        return 100.0
    return min(max(roofline_s / compute_s, 0.01), 100.0)


def step_costs(measured_s: tuple[float, float], overhead_s: tuple[float, float],
               roofline_s: tuple[float, float]) -> tuple[float, float]:
    """(overhead factor, speed scale) with which two real steps' times are explained.

    Solves measured = factor * overhead + roofline / scale for two steps (seconds; the
    first dominated by per-operator costs, the second by FLOPs and bytes). When the two
    steps cannot be told apart that way (a factor or scale not positive), the factor is 1
    and the scale is `step_scale` of the second step. Factor clamped to [0.1, 10].
    """
    for name, pair in (("measured_s", measured_s), ("overhead_s", overhead_s),
                       ("roofline_s", roofline_s)):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"{name}={pair!r} is not a pair; allowed: (small step, large step)")
        for v in pair:
            require_finite(name, v, 0, 1e6)
    (t1, t2), (o1, o2), (r1, r2) = measured_s, overhead_s, roofline_s
    det = o1 * r2 - o2 * r1
    if det > 0:
        factor = (t1 * r2 - t2 * r1) / det
        inv_scale = (o1 * t2 - o2 * t1) / det
        if factor > 0 and inv_scale > 0:
            factor = min(max(factor, 0.1), 10.0)
            return factor, step_scale(t2, factor * o2, r2)
    return 1.0, step_scale(t2, o2, r2)


def measure_step_costs(device: torch.device, base: Device, repeats: int = 30,
                       clock: Clock = time.perf_counter) -> tuple[float, float]:
    """`step_costs` of a mid-sized training step (MLP 64 -> 192 x 2 -> 16, batch 8 and 512).

    Its layers are of the size of a small course model's but none of chapter 1's shapes:
    the operators of a real step, with their fresh allocations and larger tensors, cost
    more than a tiny model's and run slower than an isolated matmul and an in-place copy,
    and by how much is measured here rather than assumed.
    """
    from dpsim.runtime.models import mlp

    model = mlp(64, 192, 2, 16, seed=0).to(device)
    times, overheads, rooflines = [], [], []
    for batch in (8, 512):
        x = torch.randn(batch, 64, generator=torch.Generator().manual_seed(0)).to(device)
        times.append(min(_step_s(mlp(64, 192, 2, 16, seed=seed).to(device), x, device,
                                 repeats // ROUNDS, clock) for seed in range(ROUNDS)))
        overheads.append(_charged_s(model, x, replace(base, fp32_tflops=1e9, bf16_tflops=1e9,
                                                      mem_bw_GBps=1e12)))
        rooflines.append(_charged_s(model, x, replace(base, op_overhead_us=0.0)))
    return step_costs((times[0], times[1]), (overheads[0], overheads[1]),
                      (rooflines[0], rooflines[1]))


def calibrate_device(device: torch.device | str = "cpu", quick: bool = True) -> Device:
    """This machine's CPU or GPU with measured peak, bandwidth and per-operator overhead.

    The per-operator cost, the matmul's FLOP/s and the copy's bandwidth are then scaled by
    `measure_step_costs`, so that they are what a training step achieves (efficiency 1.0).
    """
    dev = torch.device(device)
    clock = cpu_clock(dev)
    base = gpu_device(dev.index or 0) if dev.type == "cuda" else cpu_device(torch.get_num_threads())
    # quick: short timings (about a millisecond each), so that on a busy machine some
    # repeats run undisturbed; a 256 x 256 matmul is also the size of a small model's layers
    n = 256 if quick else 2048
    tflops = measure_matmul_tflops(dev, n, 40 if quick else 15, clock)
    bw = measure_memory_GBps(dev, (4 << 20) if quick else (256 << 20), 40 if quick else 15,
                            clock)
    overhead = measure_op_overhead_us(dev, clock=clock)
    measured = replace(base, fp32_tflops=tflops, bf16_tflops=tflops, mem_bw_GBps=bw,
                       op_overhead_us=overhead, efficiency=1.0)
    factor, scale = measure_step_costs(dev, measured, clock=clock)
    tflops, bw, overhead = tflops * scale, bw * scale, overhead * factor
    return replace(base, name=f"{base.name} (calibrated)", fp32_tflops=tflops,
                   bf16_tflops=max(tflops, base.bf16_tflops if dev.type == "cuda" else tflops),
                   mem_bw_GBps=bw, op_overhead_us=overhead, efficiency=1.0)


def measure_local_step_s(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                         optimizer: str = "sgd", lr: float = 0.1, repeats: int = 20) -> float:
    """Fastest seconds of one training step of `model` alone (no DDP) on this batch.

    Timed with `cpu_clock` (a rank's thread CPU time with one intra-op thread), so other
    programs on the machine do not count. This is the step's compute as this CPU runs this
    model, which the roofline calibration only approximates (convolutions, for instance,
    reach a lower share of the matmul's FLOP/s).
    """
    from dpsim.runtime.optimizers import build_optimizer

    device = next(model.parameters()).device
    opt = build_optimizer(optimizer, model.parameters(), lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return _min_time_s(step, device, repeats, cpu_clock(device))


def scaled_device(device: Device, factor: float) -> Device:
    """`device` with every compute time multiplied by `factor` (> 0): FLOP/s and bandwidth
    divided by it, the per-operator cost multiplied by it."""
    require_finite("factor", factor, 0, 1e6)
    if factor <= 0:
        raise ValueError(f"factor={factor!r} is out of range; allowed: > 0")
    return replace(device, fp32_tflops=device.fp32_tflops / factor,
                   bf16_tflops=device.bf16_tflops / factor,
                   mem_bw_GBps=device.mem_bw_GBps / factor,
                   op_overhead_us=device.op_overhead_us * factor)
