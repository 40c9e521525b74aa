"""Record the GPU numbers the CPU-only suite cannot measure: benchmarks/results/gpu_<gpu>.json.

Run on a CUDA machine (`make test-gpu` runs it after the GPU tests; scripts/gpu_check.sh
runs it first, on a GPU machine with no package index):

    python scripts/record_gpu.py [--out benchmarks/results]
    python scripts/record_gpu.py --gpus 2 --out DIR       (the 2-GPU parts, added to DIR's)
    python scripts/record_gpu.py --dry-run [--gpus 2] [--preset h100-80gb] --out DIR
    python scripts/record_gpu.py --plan --gpus 2          (what would run; no GPU needed)

It records the machine (GPU name, driver, CUDA, NCCL, torch and Python versions, date) and
each measurement beside dpsim's prediction for the GPU's preset, with the error and the goal:

- chapter 1: peak memory of an MLP step, torch.cuda.max_memory_allocated vs predict_single
  (goal: within 5 %);
- GPT-2 small (124M), one bf16-autocast training step: measured median vs simulated (goal:
  within 15 %); a bf16 matmul's TFLOP/s vs the preset's peak times its efficiency;
- DDP and FSDP2 over NCCL at world size 1: parameters equal one process's, FSDP2's shards
  and peak memory as predicted;
- two ranks on one GPU under NCCL (the myths lab's claim 17): failed, hung or ran;
- the real nn.DataParallel with device_ids=[0]: its CUDA phase timeline, the step vs the
  simulated one;
- fp16 autocast with a GradScaler: model-state bytes vs predicted, the scale and the
  skipped steps against GradScaler's rule.

With `--gpus 2` (gpu_check.sh's record-2gpu step, on a machine with 2 GPUs or more) it adds
three parts to the record in --out, each beside the simulated step on 2 GPUs of the device
(`runtime.machine.detect`'s link):

- the real nn.DataParallel on cuda:0 and cuda:1: the step vs the simulated one, its phases,
  the batch split in two;
- DDP over NCCL on 2 ranks: the median step vs the simulated one, both ranks' parameters
  bitwise equal and equal one process's;
- FSDP2 over NCCL on 2 ranks: every rank's shards as predicted, the peak vs the simulated
  one, parameters equal one process's.

Every part says where its numbers come from (`source`: "recorded on <device>") and that its
predictions are "simulated". What a part calls only on a GPU is a `Call` in `PLAN`:
`--plan` (and every dry run) resolves each and binds its signature, so a function that is
gone or an argument it does not take is found without a GPU.

Each number compared is {measured, predicted, unit, error, error_kind, goal, goal_met}; each
outcome checked is {expected, observed, goal_met}. Each part runs on its own: one that fails
is recorded with its error, the rest go on. `--dry-run` computes every prediction (for
`--preset`) and measures nothing. The file's `goals` and `goal_met` follow the benchmarks'
convention (benchmarks/goals.py, "gpu"); `--attach-steps` adds gpu_check.sh's steps.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import json
import math
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpsim.sim import Cluster, Device

ROOT = Path(__file__).resolve().parents[1]
MEMORY_GOAL = 0.05  # chapter 1: |predicted - measured| / measured
STEP_GOAL = 0.15  # step time and matmul rate: |predicted - measured| / measured
PARAM_GOAL = 1e-4  # |parameter - one process's| (TF32 and cuBLAS sums differ from the CPU)
EXACT = 0.0
DRY_RUN_PRESET = "h100-80gb"


@dataclass(frozen=True)
class Context:
    """Where the parts run: the preset predictions are made for; `gpu` False measures nothing;
    `gpus`: the GPUs the parts may use (a dry run's emulated count)."""

    preset: Device
    gpu: bool
    gpus: int = 1


@dataclass(frozen=True)
class Call:
    """A library function a part calls only on a GPU, as the part calls it: its `module`
    and `function` names, the values the part computes there (`args`, by name) and the
    literal keyword arguments. The part runs it (`call(*values)`); the dry run and
    tests/runtime/test_gpu_plan.py resolve it and bind its signature (`problems`), so a
    function that is gone or an argument it does not take is found without a GPU."""

    module: str
    function: str
    args: tuple[str, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self) -> Callable[..., Any]:
        """The function itself (ImportError or AttributeError when it is gone)."""
        fn: Callable[..., Any] = getattr(importlib.import_module(self.module), self.function)
        return fn

    def problems(self) -> list[str]:
        """Why this call would fail before it ran: [] when the function exists and its
        signature binds the arguments."""
        try:
            fn = self.resolve()
        except (ImportError, AttributeError) as exc:
            return [f"{self}: {type(exc).__name__}: {exc}"]
        signature = inspect.signature(fn)
        try:
            bound = signature.bind(*self.args, **self.kwargs)
        except TypeError as exc:
            return [f"{self}: {exc}"]
        loose = [n for n, p in signature.parameters.items()
                 if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and bound.arguments.get(n)]
        # what *args or **kwargs takes is checked by no signature: name the real function
        return [f"{self}: passes {bound.arguments[n]!r} through *{n}, which no signature "
                "checks" for n in loose]

    def __call__(self, *values: Any) -> Any:
        if len(values) != len(self.args):
            raise TypeError(f"{self} takes the values {self.args}; got {len(values)}")
        return self.resolve()(*values, **self.kwargs)

    def __str__(self) -> str:
        given = [*self.args, *(f"{k}={v!r}" for k, v in self.kwargs.items())]
        return f"{self.module}.{self.function}({', '.join(given)})"


def compare(measured: float | None, predicted: float, unit: str, goal: float,
            error_kind: str = "relative") -> dict[str, Any]:
    """One number beside its prediction: error (relative to the measured value, or absolute)
    and whether it is within `goal`; measured None (not measured) leaves both None."""
    error: float | None = None
    if measured is not None:
        diff = abs(predicted - measured)
        error = diff / abs(measured) if error_kind == "relative" and measured else diff
        if error_kind == "relative" and not measured:
            error = 0.0 if diff == 0 else math.inf
    return {"measured": measured, "predicted": predicted, "unit": unit, "error": error,
            "error_kind": error_kind, "goal": goal,
            "goal_met": None if error is None else bool(error <= goal)}


def check(observed: Any, expected: Any, met: bool | None) -> dict[str, Any]:
    """One outcome beside what was expected (met None: not observed)."""
    return {"observed": observed, "expected": expected, "goal_met": met}


# --- what the parts call only on a GPU (the dry run binds each) ----------------------------

LAUNCH_2GPU_S = 40.0  # each 2-rank launch: NCCL's start and a few small steps take ~10 s
TRAIN = Call("dpsim.labs.ch01_single_device.train_single", "train", ("model", "dataset"),
             {"steps": 3, "batch_size": 64, "progress": False, "device": "cuda"})
RUN_DDP_1 = Call("dpsim.labs.ch05_ddp.ddp_train", "run_ddp", ("cfg",),
                 {"world_size": 1, "backend": "nccl", "timeout_s": 120.0})
ONE_PROCESS_1 = Call("dpsim.labs.ch05_ddp.ddp_train", "train_global_batch", ("cfg",),
                     {"world_size": 1})
PARAM_DIFF = Call("dpsim.labs.ch05_ddp.ddp_train", "max_param_difference", ("ddp", "single"))
RUN_FSDP_1 = Call("dpsim.runtime.fsdp_run", "run_fsdp_models", (),
                  {"world_size": 1, "models": ("mlp",), "steps": 2, "batch_size": 4,
                   "backend": "nccl", "timeout_s": 120.0})
SHARED_GPU = Call("dpsim.labs.ch08_myths.myths_lab", "nccl_two_ranks_one_gpu", (),
                  {"timeout_s": 60.0})
DP_STEP_1 = Call("dpsim.labs.ch03_data_parallel.dp_real", "run_step", ("module", "x", "y"),
                 {"n_devices": 1, "mode": "cuda"})
AUTOCAST = Call("dpsim.labs.ch09_precision.precision_measure", "autocast_step", (),
                {"dtype": "fp16", "device": "cuda", "steps": 2, "batch": 4})
GPU_DEVICE = Call("dpsim.runtime.machine", "gpu_device", (), {"index": 0})
DETECT = Call("dpsim.runtime.machine", "detect")
DP_STEP_2 = Call("dpsim.labs.ch03_data_parallel.dp_real", "run_step", ("module", "x", "y"),
                 {"n_devices": 2, "mode": "cuda", "warmup": 2})
RUN_DDP_2 = Call("dpsim.labs.ch05_ddp.ddp_train", "run_ddp", ("cfg",),
                 {"world_size": 2, "backend": "nccl", "timeout_s": LAUNCH_2GPU_S})
ONE_PROCESS_2 = Call("dpsim.labs.ch05_ddp.ddp_train", "train_global_batch", ("cfg",),
                     {"world_size": 2})
RUN_FSDP_2 = Call("dpsim.runtime.fsdp_run", "run_fsdp_models", (),
                  {"world_size": 2, "models": ("mlp",), "steps": 2, "batch_size": 4,
                   "backend": "nccl", "timeout_s": LAUNCH_2GPU_S})


def one_device(preset: Device) -> Cluster:
    """A one-device cluster of the preset (a link is never used with one device)."""
    from dpsim.sim import NVLINK4, Cluster

    return Cluster(f"one {preset.name}", preset, 1, 1, NVLINK4)


def two_gpus(ctx: Context) -> Cluster:
    """Two GPUs of the preset, joined as this machine joins them (`runtime.machine.detect`:
    NVLink with peer access, else PCIe); a dry run assumes the link the preset's card has."""
    from dpsim.runtime.machine import intra_link
    from dpsim.sim import Cluster

    if ctx.gpu:
        return replace(DETECT(), devices_per_node=2)
    link, how = intra_link(ctx.preset.name, peers=True)
    return Cluster(f"2 x {ctx.preset.name} ({how}, assumed)", ctx.preset, 2, 1, link)


# --- the machine ----------------------------------------------------------------------------


def machine(gpu: bool) -> dict[str, Any]:
    """GPU name, driver, CUDA, NCCL, torch and Python versions, and the date (UTC)."""
    import torch

    driver = None
    smi = shutil.which("nvidia-smi") if gpu else None
    if smi:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
        driver = out.strip().splitlines()[0] if out.strip() else None
    nccl = None
    if gpu and torch.distributed.is_nccl_available():
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return {"gpu": torch.cuda.get_device_name(0) if gpu else None,
            "gpus": torch.cuda.device_count() if gpu else 0, "driver": driver,
            "cuda": torch.version.cuda, "nccl": nccl, "torch": torch.__version__,
            "python": sys.version.split()[0],
            "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def device_slug(cuda_name: str | None) -> str:
    """The results file's device name: the preset's family ("NVIDIA H100 80GB HBM3" -> "h100",
    "NVIDIA H200" -> "h200"), else the CUDA name made safe; None (no GPU) -> "dry_run"."""
    from dpsim.sim import match_name

    if cuda_name is None:
        return "dry_run"
    key = match_name(cuda_name)
    name = re.sub(r"-\d+gb$", "", key) if key else cuda_name.lower()
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_") or "unknown"


# --- the parts ------------------------------------------------------------------------------


def chapter1_memory(ctx: Context) -> dict[str, Any]:
    """Peak memory of chapter 1's MLP step on cuda:0 against the simulator."""
    import torch

    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.models import mlp
    from dpsim.sim import predict_single

    batch = 64
    predicted = predict_single(workload_from_module(mlp(), torch.randn(batch, 32)), batch).total
    measured = None
    if ctx.gpu:
        from dpsim.runtime.data import classification

        result = TRAIN(mlp(), classification(256, 32, 10))
        assert result.memory.cuda is not None
        measured = result.memory.cuda["peak_allocated"]
    return {"comparisons": {"peak_allocated_bytes": compare(measured, predicted, "bytes",
                                                            MEMORY_GOAL)},
            "details": {"batch": batch, "model": "mlp()", "steps": 3}}


def gpt2_step(ctx: Context, batch: int = 8, steps: int = 6) -> dict[str, Any]:
    """GPT-2 small, bf16 autocast + fp32 AdamW: median measured step vs the simulator."""
    import torch

    from dpsim.runtime.models.gpt2 import gpt2_small
    from dpsim.sim import SingleConfig, get_workload, simulate, step_result

    cfg = SingleConfig(batch_size=batch, dtype="bf16", mixed_precision=True)
    predicted = step_result(simulate(get_workload("gpt2-124m"), ctx.preset, cfg)).step_s
    details: dict[str, Any] = {"batch": batch, "steps_timed": steps - 1}
    measured = None
    if ctx.gpu:
        model = gpt2_small().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, 50257, (batch, model.seq_len), device="cuda")
        times = []
        for _ in range(steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                     ids[:, 1:].flatten())
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        measured = statistics.median(times[1:])
        details.update(seq_len=model.seq_len, step_s=times, worst_step_s=max(times[1:]),
                       peak_allocated_bytes=torch.cuda.max_memory_allocated())
        del model, opt
        torch.cuda.empty_cache()
    return {"comparisons": {"step_s": compare(measured, predicted, "s", STEP_GOAL)},
            "details": details}


def bf16_matmul(ctx: Context, n: int = 8192, repeats: int = 10) -> dict[str, Any]:
    """An n x n x n bf16 matmul's TFLOP/s vs the preset's roofline (peak x efficiency)."""
    p = ctx.preset
    flops = 2.0 * n**3
    nbytes = 3.0 * n * n * 2
    predicted_s = (max(flops / (p.bf16_tflops * 1e12 * p.efficiency), nbytes / (p.mem_bw_GBps
                                                                               * 1e9))
                   + p.op_overhead_us * 1e-6)
    predicted = flops / predicted_s / 1e12
    details: dict[str, Any] = {"n": n, "peak_tflops": p.bf16_tflops,
                               "preset_efficiency": p.efficiency}
    measured = None
    if ctx.gpu:
        import torch

        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(repeats):
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        measured = flops / statistics.median(times) / 1e12
        details.update(fraction_of_peak=measured / p.bf16_tflops, times_s=times)
        del a, b
        torch.cuda.empty_cache()
    return {"comparisons": {"bf16_matmul_tflops": compare(measured, predicted, "TFLOP/s",
                                                          STEP_GOAL)},
            "details": details}


def ddp_nccl_world1(ctx: Context) -> dict[str, Any]:
    """DDP over NCCL with one rank: its parameters equal one process's on the same batch."""
    from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig

    cfg = DDPRunConfig(n_samples=96, batch_size=8, steps=4, progress=False)
    if not ctx.gpu:
        return {"comparisons": {"max_param_difference": compare(None, 0.0, "absolute",
                                                                PARAM_GOAL, "absolute")},
                "checks": {"backend": check(None, "nccl", None)}}
    t0 = time.perf_counter()
    run = RUN_DDP_1(cfg)
    launch_s = time.perf_counter() - t0
    diff = PARAM_DIFF(run.ranks[0].params, ONE_PROCESS_1(cfg).params)
    backend = run.ranks[0].backend
    return {"comparisons": {"max_param_difference": compare(diff, 0.0, "absolute", PARAM_GOAL,
                                                            "absolute")},
            "checks": {"backend": check(backend, "nccl", backend == "nccl")},
            "details": {"launch_s": launch_s, "losses": run.ranks[0].losses}}


def fsdp_nccl_world1(ctx: Context) -> dict[str, Any]:
    """FSDP2 over NCCL with one rank: shards as predicted, peak memory vs the simulator (as
    notebook 06 shows it), parameters equal one process's."""
    return fsdp_part(ctx, RUN_FSDP_1, one_device(ctx.preset))


def fsdp_part(ctx: Context, run_fsdp: Call, cluster: Cluster) -> dict[str, Any]:
    """FSDP2 over NCCL on `cluster`'s ranks (`run_fsdp`: run_fsdp_models as the part calls
    it): every rank's shards as predicted, the highest peak of any rank vs the simulated
    one, parameters equal one process's on the global batch."""
    import torch

    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.fsdp_builders import IN_FEATURES, fsdp_model
    from dpsim.sim import FSDPConfig, simulate, step_result

    (model,), batch = run_fsdp.kwargs["models"], run_fsdp.kwargs["batch_size"]
    workload = workload_from_module(fsdp_model(model), torch.randn(batch, IN_FEATURES))
    predicted_peak = max(step_result(simulate(workload, cluster, FSDPConfig(
        batch_size=batch, precision="fp32"))).peak_bytes)
    details: dict[str, Any] = {"model": model, "batch": batch, "cluster": cluster.name}
    if not ctx.gpu:
        return {"comparisons": {
            "peak_allocated_bytes": compare(None, predicted_peak, "bytes", MEMORY_GOAL),
            "max_param_difference": compare(None, 0.0, "absolute", PARAM_GOAL, "absolute")},
            "checks": {"shards_as_predicted": check(None, True, None)}, "details": details}
    t0 = time.perf_counter()
    run = run_fsdp()[model]
    peaks = [c["peak_allocated"] for c in run.cuda if c]
    return {"comparisons": {
        "peak_allocated_bytes": compare(max(peaks) if peaks else None, predicted_peak,
                                        "bytes", MEMORY_GOAL),
        "max_param_difference": compare(run.max_abs_diff, 0.0, "absolute", PARAM_GOAL,
                                        "absolute")},
        "checks": {"shards_as_predicted": check(run.matches_prediction, True,
                                                run.matches_prediction)},
        "details": {**details, "device": run.device, "peak_allocated_per_rank": peaks,
                    "launch_s": time.perf_counter() - t0}}


def nccl_two_ranks_one_gpu(ctx: Context) -> dict[str, Any]:
    """Claim 17's evidence, as chapter 8 runs it: two NCCL ranks on one GPU fail or hang."""
    expected = "failed or hung (claim 17)"
    if not ctx.gpu:
        return {"checks": {"outcome": check(None, expected, None)}}
    t0 = time.perf_counter()
    result = SHARED_GPU()
    outcome = result["outcome"]
    return {"checks": {"outcome": check(outcome, expected, outcome in ("failed", "hung"))},
            "details": {"nccl_said": result["detail"], "seconds": time.perf_counter() - t0}}


def dataparallel_one_gpu(ctx: Context, batch: int = 64) -> dict[str, Any]:
    """The real nn.DataParallel with device_ids=[0]: its phases on the CUDA timeline, and its
    step against the simulated DataParallel step on one device."""
    import torch

    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.models import mlp
    from dpsim.sim import DPConfig, simulate, step_result

    workload = workload_from_module(mlp(32, 256, 3, 10, seed=0), torch.randn(batch, 32))
    predicted = step_result(simulate(workload, one_device(ctx.preset),
                                     DPConfig(n_devices=1, batch_size=batch))).step_s
    phases = ["scatter", "forward", "loss", "backward"]
    if not ctx.gpu:
        return {"comparisons": {"step_s": compare(None, predicted, "s", STEP_GOAL)},
                "checks": {"phases": check(None, phases, None)}}
    from dpsim.runtime.data import classification

    x, y = classification(n_samples=batch, n_features=32, n_classes=10, seed=0).tensors
    result = DP_STEP_1(mlp(32, 256, 3, 10, seed=0), x, y)
    trace = result.trace.events
    events = [{"kind": e.kind, "start_s": e.start_s, "end_s": e.end_s, "label": e.label}
              for e in trace]
    kinds = sorted({e.kind for e in trace})
    measured = (max(e.end_s for e in trace) - min(e.start_s for e in trace)
                if trace else None)
    return {"comparisons": {"step_s": compare(measured, predicted, "s", STEP_GOAL)},
            "checks": {"phases": check(kinds, phases, set(phases) <= set(kinds))},
            "details": {"how": result.how, "chunk_sizes": result.chunk_sizes,
                        "events": events,
                        "peak_allocated": result.trace.meta.get("peak_allocated")}}


def fp16_grad_scaler(ctx: Context, steps: int = 8) -> dict[str, Any]:
    """fp16 autocast with a GradScaler: model-state bytes vs the prediction (exact), and the
    scale against GradScaler's rule (halved at each skipped step, unchanged otherwise within
    its growth interval); the optimizer steps once per step not skipped."""
    import torch
    from torch import nn

    from dpsim.runtime.models.tiny_transformer import tiny_transformer, token_batch
    from dpsim.sim import policy_model_state_bytes, precision_policy

    model = tiny_transformer(0)
    n, t = sum(p.numel() for p in model.parameters()), len(list(model.parameters()))
    pred = policy_model_state_bytes(n, t, precision_policy("torch_amp", "fp16"))
    predicted_states = pred.parameters + pred.gradients + pred.optimizer
    init_scale = 2.0**16
    if not ctx.gpu:
        return {"comparisons": {
            "model_state_bytes": compare(None, predicted_states, "bytes", EXACT),
            "final_scale": compare(None, init_scale, "scale", EXACT, "absolute"),
            "optimizer_steps": compare(None, steps, "steps", EXACT, "absolute")},
            "details": {"steps": steps, "init_scale": init_scale}}
    step = AUTOCAST()
    m = step.measured
    model = model.cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    scaler = torch.amp.GradScaler("cuda", init_scale=init_scale)
    x, y = token_batch(4, 0)
    x, y = x.cuda(), y.cuda()
    scales, skipped = [], 0
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        before = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        skipped += scaler.get_scale() < before
    first = next(iter(model.parameters()))
    stepped = int(opt.state[first]["step"]) if opt.state.get(first) else 0
    rule_scale = init_scale * 0.5**skipped
    return {"comparisons": {
        "model_state_bytes": compare(m.parameters + m.gradients + m.optimizer,
                                     predicted_states, "bytes", EXACT),
        "final_scale": compare(scales[-1], rule_scale, "scale", EXACT, "absolute"),
        "optimizer_steps": compare(stepped, steps - skipped, "steps", EXACT, "absolute")},
        "details": {"steps": steps, "init_scale": init_scale, "scales": scales,
                    "skipped_steps": skipped, "dtypes": step.dtypes, "losses": step.losses}}


# --- the parts on 2 GPUs (gpu_check.sh's record-2gpu step) ---------------------------------


def dataparallel_two_gpus(ctx: Context, batch: int = 64) -> dict[str, Any]:
    """The real nn.DataParallel on cuda:0 and cuda:1: its step against the simulated
    DataParallel step on two GPUs of the device, its phases, and the batch split in two."""
    import torch

    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.models import mlp
    from dpsim.sim import DPConfig, simulate, step_result

    cluster = two_gpus(ctx)
    workload = workload_from_module(mlp(32, 256, 3, 10, seed=0), torch.randn(batch, 32))
    predicted = step_result(simulate(workload, cluster,
                                     DPConfig(n_devices=2, batch_size=batch))).step_s
    phases = ["scatter", "replicate", "forward", "gather", "loss", "backward"]
    chunks = [batch // 2, batch - batch // 2]
    details: dict[str, Any] = {"batch": batch, "model": "mlp(32, 256, 3, 10)",
                               "cluster": cluster.name}
    if not ctx.gpu:
        return {"comparisons": {"step_s": compare(None, predicted, "s", STEP_GOAL)},
                "checks": {"phases": check(None, phases, None),
                           "chunk_sizes": check(None, chunks, None)}, "details": details}
    from dpsim.runtime.data import classification

    x, y = classification(n_samples=batch, n_features=32, n_classes=10, seed=0).tensors
    result = DP_STEP_2(mlp(32, 256, 3, 10, seed=0), x, y)
    trace = result.trace.events
    kinds = sorted({e.kind for e in trace})
    measured = (max(e.end_s for e in trace) - min(e.start_s for e in trace)
                if trace else None)
    return {"comparisons": {"step_s": compare(measured, predicted, "s", STEP_GOAL)},
            "checks": {"phases": check(kinds, phases, set(phases) <= set(kinds)),
                       "chunk_sizes": check(result.chunk_sizes, chunks,
                                            result.chunk_sizes == chunks)},
            "details": {**details, "how": result.how,
                        "peak_allocated": result.trace.meta.get("peak_allocated")}}


def ddp_nccl_world2(ctx: Context) -> dict[str, Any]:
    """DDP over NCCL on 2 ranks (one GPU each): the median step after DDP rebuilt its
    buckets vs the simulated DDP step on two GPUs of the device; both ranks' parameters
    equal (bitwise) and equal one process's on the global batch."""
    import statistics

    from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig, build_dataset, build_model
    from dpsim.runtime.capture import workload_from_module
    from dpsim.sim import DDPConfig, simulate, step_result

    cfg = DDPRunConfig(hidden=1024, depth=3, n_features=512, n_samples=1024, batch_size=64,
                       steps=8, progress=False)
    cluster = two_gpus(ctx)
    x = build_dataset(cfg).tensors[0][:cfg.batch_size]
    predicted = step_result(simulate(workload_from_module(build_model(cfg), x), cluster,
                                     DDPConfig(batch_size=cfg.batch_size,
                                               optimizer=cfg.optimizer))).step_s
    details: dict[str, Any] = {"config": {"hidden": cfg.hidden, "depth": cfg.depth,
                                          "n_features": cfg.n_features,
                                          "batch_size_per_rank": cfg.batch_size,
                                          "steps": cfg.steps}, "cluster": cluster.name,
                               "timed": "rank 0's median of steps 4 on (DDP rebuilds its "
                                        "buckets in step 2)"}
    if not ctx.gpu:
        return {"comparisons": {
            "step_s": compare(None, predicted, "s", STEP_GOAL),
            "max_param_difference": compare(None, 0.0, "absolute", PARAM_GOAL, "absolute"),
            "max_rank_difference": compare(None, 0.0, "absolute", EXACT, "absolute")},
            "checks": {"backend": check(None, "nccl", None)}, "details": details}
    t0 = time.perf_counter()
    run = RUN_DDP_2(cfg)
    launch_s = time.perf_counter() - t0
    times = run.ranks[0].step_times_s
    diff = PARAM_DIFF(run.ranks[0].params, ONE_PROCESS_2(cfg).params)
    backends = sorted({r.backend for r in run.ranks})
    return {"comparisons": {
        "step_s": compare(statistics.median(times[3:]) if len(times) > 3 else None,
                          predicted, "s", STEP_GOAL),
        "max_param_difference": compare(diff, 0.0, "absolute", PARAM_GOAL, "absolute"),
        "max_rank_difference": compare(run.max_rank_difference(), 0.0, "absolute", EXACT,
                                       "absolute")},
        "checks": {"backend": check(backends, ["nccl"], backends == ["nccl"])},
        "details": {**details, "launch_s": launch_s, "step_times_s": times}}


def fsdp_nccl_world2(ctx: Context) -> dict[str, Any]:
    """FSDP2 over NCCL on 2 ranks (one GPU each): each rank's shards as predicted, the peak
    vs the simulated FSDP step on two GPUs of the device, parameters equal one process's."""
    return fsdp_part(ctx, RUN_FSDP_2, two_gpus(ctx))


PARTS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "chapter1_memory": chapter1_memory, "gpt2_small_bf16_step": gpt2_step,
    "bf16_matmul": bf16_matmul, "ddp_nccl_world_size_1": ddp_nccl_world1,
    "fsdp2_nccl_world_size_1": fsdp_nccl_world1,
    "nccl_two_ranks_one_gpu": nccl_two_ranks_one_gpu,
    "dataparallel_device_ids_0": dataparallel_one_gpu,
    "fp16_grad_scaler": fp16_grad_scaler,
}
TWO_GPU_PARTS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "dataparallel_2_gpus": dataparallel_two_gpus,
    "ddp_nccl_world_size_2": ddp_nccl_world2,
    "fsdp2_nccl_world_size_2": fsdp_nccl_world2,
}
# What each part (and the record itself) calls only on a GPU: the dry run binds every one
# (tests/runtime/test_gpu_plan.py checks that each part's code uses exactly these).
PLAN: dict[str, tuple[Call, ...]] = {
    "record": (GPU_DEVICE,), "chapter1_memory": (TRAIN,), "gpt2_small_bf16_step": (),
    "bf16_matmul": (), "ddp_nccl_world_size_1": (RUN_DDP_1, ONE_PROCESS_1, PARAM_DIFF),
    "fsdp2_nccl_world_size_1": (RUN_FSDP_1,), "nccl_two_ranks_one_gpu": (SHARED_GPU,),
    "dataparallel_device_ids_0": (DP_STEP_1,), "fp16_grad_scaler": (AUTOCAST,),
    "record_2_gpus": (GPU_DEVICE, DETECT), "dataparallel_2_gpus": (DP_STEP_2,),
    "ddp_nccl_world_size_2": (RUN_DDP_2, ONE_PROCESS_2, PARAM_DIFF),
    "fsdp2_nccl_world_size_2": (RUN_FSDP_2,),
}


def plan(gpus: int) -> list[tuple[str, tuple[Call, ...]]]:
    """What record_gpu.py runs on a machine with `gpus` GPUs, in order: gpu_check.sh's
    record step (the one-GPU parts), then, from 2 GPUs on, its record-2gpu step."""
    steps = [("record", PLAN["record"]), *((n, PLAN[n]) for n in PARTS)]
    if gpus >= 2:
        steps += [("record_2_gpus", PLAN["record_2_gpus"]),
                  *((n, PLAN[n]) for n in TWO_GPU_PARTS)]
    return steps


def plan_problems(gpus: int) -> list[str]:
    """Every call of `plan(gpus)` that names a function that is gone or passes an argument
    it does not take ([] when the plan holds)."""
    return [p for _, calls in plan(gpus) for c in calls for p in c.problems()]


def print_plan(gpus: int, step_only: bool = False) -> int:
    """Print `plan(gpus)` (`step_only`: what its own step adds to fewer GPUs' plan), each
    call bound or why not; 1 when a call would fail, else 0."""
    steps = plan(gpus)[len(plan(gpus - 1)) if step_only and gpus > 1 else 0:]
    print(f"record_gpu: the plan on {gpus} GPU{'s' if gpus > 1 else ''}"
          f"{' (this step)' if step_only else ''}:")
    bad = 0
    for name, calls in steps:
        print(f"  {name}" + ("" if calls else ": torch only"))
        for c in calls:
            found = c.problems()
            bad += bool(found)
            print(f"    {'bound' if not found else 'BROKEN'}  {found[0] if found else c}")
    print(f"record_gpu: {'every call binds' if not bad else f'{bad} calls would fail'}")
    return 1 if bad else 0


# --- the record -----------------------------------------------------------------------------


def stamp(result: dict[str, Any]) -> dict[str, Any]:
    """`result` with its goals and goal_met (benchmarks/goals.py's "gpu")."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # benchmarks/ when run as a script
    from benchmarks.goals import stamp as stamp_goals

    return stamp_goals(result, "gpu")


def source(ctx: Context) -> str:
    """Where a part's numbers come from: "recorded on <device>" (2 x ... on 2 GPUs)."""
    if not ctx.gpu:
        return "nothing recorded: a dry run without a GPU"
    import torch

    name = torch.cuda.get_device_name(0)
    return f"recorded on {name}" if ctx.gpus == 1 else f"recorded on {ctx.gpus} x {name}"


def run_parts(ctx: Context, parts: dict[str, Callable[[Context], dict[str, Any]]]
              ) -> dict[str, Any]:
    """Each part in turn: status "measured", "predicted only" (no GPU) or "error"; its
    `source` (recorded on which device) and its predictions' ("simulated")."""
    out: dict[str, Any] = {}
    where = source(ctx)
    for name, part in parts.items():
        t0 = time.perf_counter()
        try:
            entry = {"status": "measured" if ctx.gpu else "predicted only", "source": where,
                     "prediction": "simulated", **part(ctx)}
            if not ctx.gpu:
                entry["skipped"] = "no CUDA GPU (dry run): predictions only, nothing measured"
        except Exception as exc:  # one part's failure is a result, the rest still run
            entry = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000],
                     "traceback": traceback.format_exc()[-4000:]}
        entry["seconds"] = time.perf_counter() - t0
        out[name] = entry
        print(f"record_gpu: {name}: {entry['status']} ({entry['seconds']:.1f} s)", flush=True)
    return out


def record(out_dir: Path, ctx: Context | None = None) -> Path:
    """Run the parts for `ctx.gpus` (1: PARTS; 2: TWO_GPU_PARTS, added to the record
    already in `out_dir`, if any), write gpu_<device>.json under `out_dir`, return its path."""
    if ctx is None:
        ctx = Context(GPU_DEVICE(), gpu=True)
    result: dict[str, Any] = {"benchmark": "gpu", "machine": machine(ctx.gpu),
                              "preset": ctx.preset.name,
                              "measured": "on this GPU" if ctx.gpu else
                              "nothing: a dry run without a GPU, predictions only"}
    path = out_dir / f"gpu_{device_slug(result['machine']['gpu'])}.json"
    parts = TWO_GPU_PARTS if ctx.gpus >= 2 else PARTS
    if ctx.gpus >= 2 and path.exists():
        result = json.loads(path.read_text())
    result.setdefault("parts", {})
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, part in parts.items():  # written after each part: a step cut off keeps them
        result["parts"].update(run_parts(ctx, {name: part}))
        path.write_text(json.dumps(stamp(result), indent=2, default=str) + "\n")
    return path


def read_steps(path: Path) -> list[dict[str, Any]]:
    """gpu_check.sh's step table: name, status, exit code, seconds, note (tab-separated)."""
    steps = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        name, status, rc, seconds, note = (line.split("\t") + [""] * 5)[:5]
        steps.append({"step": name, "status": status, "rc": int(rc) if rc else None,
                      "seconds": float(seconds) if seconds else None, "note": note})
    return steps


def attach_steps(out_dir: Path, steps_file: Path) -> Path:
    """Add gpu_check.sh's steps to the record in `out_dir` (one with the machine alone when
    record_gpu wrote none) and stamp its goals again; return its path."""
    found = sorted(out_dir.glob("gpu_*.json"), key=lambda p: p.stat().st_mtime)
    if found:
        path = found[-1]
        result = json.loads(path.read_text())
    else:
        import torch

        gpu = torch.cuda.is_available()
        result = {"benchmark": "gpu", "machine": machine(gpu), "preset": None,
                  "measured": "nothing: record_gpu.py wrote no record (see the log)",
                  "parts": {}}
        path = out_dir / f"gpu_{device_slug(result['machine']['gpu'])}.json"
    result["check"] = {"steps": read_steps(steps_file),
                       "log": "gpu_check.log beside this file"}
    path.write_text(json.dumps(stamp(result), indent=2, default=str) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Refuse without CUDA (unless --dry-run); otherwise record and print where."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: compute every prediction, measure nothing")
    parser.add_argument("--preset", default=DRY_RUN_PRESET,
                        help="the device preset a dry run predicts for")
    parser.add_argument("--attach-steps", type=Path, default=None, metavar="TSV",
                        help="add gpu_check.sh's step table to the record in --out")
    parser.add_argument("--gpus", type=int, choices=(1, 2), default=1,
                        help="1: the one-GPU parts; 2: the 2-GPU parts, added to the record "
                             "in --out (a dry run emulates the count)")
    parser.add_argument("--plan", action="store_true",
                        help="print what would run on --gpus GPUs, each call bound; run none")
    args = parser.parse_args(argv)
    if args.attach_steps is not None:
        print(f"record_gpu: steps added to {attach_steps(args.out, args.attach_steps)}")
        return 0
    if args.plan:
        return print_plan(args.gpus)
    import torch

    if args.dry_run:
        from dpsim.sim import get_device

        if print_plan(args.gpus, step_only=True):
            return 1
        ctx = Context(get_device(args.preset), gpu=False, gpus=args.gpus)
        print(f"record_gpu: dry run, wrote {record(args.out, ctx)}")
        return 0
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < args.gpus:
        print("record_gpu: " + ("no CUDA GPU here" if not have else
                                f"{have} CUDA GPU here, {args.gpus} needed")
              + "; nothing recorded", file=sys.stderr)
        return 2
    print(f"record_gpu: wrote {record(args.out, Context(GPU_DEVICE(), True, args.gpus))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
