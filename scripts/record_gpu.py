"""Record the GPU numbers the CPU-only suite cannot measure: benchmarks/results/gpu_<gpu>.json.

Run on a CUDA machine (`make test-gpu` runs it after the GPU tests):

    python scripts/record_gpu.py [--out benchmarks/results]

It records the machine (GPU name, driver, CUDA, NCCL and torch versions, date) and, each
with what the simulator predicted beside it where there is a prediction:

- chapter 1: peak memory of an MLP step, torch.cuda.max_memory_allocated vs predict_single
  (goal: within 5 %);
- GPT-2 small (124M), one bf16-autocast training step: measured median vs simulated;
- DDP and FSDP2 over NCCL at world size 1 (they run, and how long a step takes);
- two ranks on one GPU under NCCL (the myths lab's claim 17): failed, hung or ran;
- the real nn.DataParallel with device_ids=[0]: its CUDA phase timeline.

Each part runs on its own: one that fails is recorded with its error, the rest go on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEMORY_GOAL = 0.05  # chapter 1: |predicted - measured| / measured


def machine() -> dict[str, Any]:
    """GPU name, driver, CUDA, NCCL and torch versions, and the date (UTC)."""
    import torch

    driver = None
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
        driver = out.strip().splitlines()[0] if out.strip() else None
    nccl = torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None
    return {"gpu": torch.cuda.get_device_name(0), "gpus": torch.cuda.device_count(),
            "driver": driver, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
            "torch": torch.__version__, "python": sys.version.split()[0],
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}


def chapter1_memory() -> dict[str, Any]:
    """Peak memory of chapter 1's MLP step on cuda:0 against the simulator."""
    import torch

    from dpsim.labs.ch01_single_device.train_single import train
    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.data import classification
    from dpsim.runtime.models import mlp
    from dpsim.sim.cost.memory import predict_single

    batch = 64
    result = train(mlp(), classification(256, 32, 10), steps=3, batch_size=batch,
                   progress=False, device="cuda")
    assert result.memory.cuda is not None
    measured = result.memory.cuda["peak_allocated"]
    predicted = predict_single(workload_from_module(mlp(), torch.randn(batch, 32)), batch).total
    error = abs(predicted - measured) / measured
    return {"measured_peak_bytes": measured, "predicted_peak_bytes": predicted,
            "relative_error": error, "goal": MEMORY_GOAL, "goal_met": error <= MEMORY_GOAL}


def gpt2_step(batch: int = 8, steps: int = 6) -> dict[str, Any]:
    """GPT-2 small, bf16 autocast + fp32 Adam: median measured step vs the simulator."""
    import torch

    from dpsim.runtime.machine import gpu_device
    from dpsim.runtime.models.gpt2 import gpt2_small
    from dpsim.sim.strategies.single import SingleConfig, simulate, step_result
    from dpsim.sim.workload import get_workload

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
    cfg = SingleConfig(batch_size=batch, dtype="bf16", mixed_precision=True)
    predicted = step_result(simulate(get_workload("gpt2-124m"), gpu_device(0), cfg)).step_s
    return {"batch": batch, "seq_len": model.seq_len, "measured_step_s": measured,
            "worst_step_s": max(times[1:]), "simulated_step_s": predicted,
            "relative_error": (predicted - measured) / measured,
            "preset": gpu_device(0).name}


def ddp_fsdp_nccl_world1() -> dict[str, Any]:
    """DDP and FSDP2 over NCCL with one rank: they run; seconds per launch."""
    from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig, run_ddp
    from dpsim.labs.ch06_fsdp.fsdp_train import run_fsdp

    t0 = time.perf_counter()
    ddp = run_ddp(DDPRunConfig(n_samples=96, batch_size=8, steps=4, progress=False),
                  world_size=1, backend="nccl")
    t1 = time.perf_counter()
    fsdp = run_fsdp(1, "residual", steps=2, backend="nccl")
    t2 = time.perf_counter()
    return {"ddp_backend": ddp.ranks[0].backend, "ddp_launch_s": t1 - t0,
            "fsdp_device": fsdp.device, "fsdp_matches_prediction": fsdp.matches_prediction,
            "fsdp_peak_allocated": fsdp.cuda[0]["peak_allocated"] if fsdp.cuda[0] else None,
            "fsdp_launch_s": t2 - t1}


def _two_ranks_one_gpu(rank: int, world_size: int) -> str:
    """Inside a gloo group: an NCCL group whose ranks all sit on cuda:0, one all-reduce."""
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    group = dist.new_group(list(range(world_size)), backend="nccl")
    t = torch.ones(1, device="cuda:0")
    dist.all_reduce(t, group=group)
    torch.cuda.synchronize()
    return f"rank {rank}: all-reduce returned {t.item()}"


def nccl_two_ranks_one_gpu(timeout_s: float = 90.0) -> dict[str, Any]:
    """Claim 17's evidence: two NCCL ranks on one GPU fail, hang (timeout) or run."""
    from dpsim.runtime.launch import LaunchTimeoutError, RankFailedError, launch

    try:
        out = launch(_two_ranks_one_gpu, 2, backend="gloo", timeout_s=timeout_s)
        return {"outcome": "ran", "detail": out, "failed_or_hung": False}
    except LaunchTimeoutError as exc:
        return {"outcome": "hung", "detail": str(exc)[:2000], "failed_or_hung": True}
    except RankFailedError as exc:
        return {"outcome": "failed", "detail": str(exc)[:2000], "failed_or_hung": True}


def dataparallel_one_gpu() -> dict[str, Any]:
    """The real nn.DataParallel with device_ids=[0]: its phases on the CUDA timeline."""
    from dpsim.labs.ch03_data_parallel.dp_real import run_step
    from dpsim.runtime.data import classification
    from dpsim.runtime.models import mlp

    x, y = classification(n_samples=64, n_features=32, n_classes=10, seed=0).tensors
    result = run_step(mlp(32, 256, 3, 10, seed=0), x, y, 1, mode="cuda")
    events = [{"kind": e.kind, "start_s": e.start_s, "end_s": e.end_s, "label": e.label}
              for e in result.trace.events]
    return {"how": result.how, "chunk_sizes": result.chunk_sizes, "events": events,
            "peak_allocated": result.trace.meta["peak_allocated"]}


PARTS: dict[str, Callable[[], dict[str, Any]]] = {
    "chapter1_memory": chapter1_memory, "gpt2_small_bf16_step": gpt2_step,
    "ddp_fsdp_nccl_world_size_1": ddp_fsdp_nccl_world1,
    "nccl_two_ranks_one_gpu": nccl_two_ranks_one_gpu,
    "dataparallel_device_ids_0": dataparallel_one_gpu,
}


def record(out_dir: Path) -> Path:
    """Run every part, write gpu_<gpu name>.json under `out_dir`, return its path."""
    result: dict[str, Any] = {"machine": machine(), "measured": "on this GPU", "parts": {}}
    for name, part in PARTS.items():
        try:
            result["parts"][name] = part()
        except Exception as exc:  # one part's failure is a result, the rest still run
            result["parts"][name] = {"error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc()[-4000:]}
    slug = re.sub(r"[^a-z0-9]+", "_", result["machine"]["gpu"].lower()).strip("_")
    path = out_dir / f"gpu_{slug}.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Refuse without CUDA; otherwise record and print where."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("record_gpu: no CUDA GPU here; nothing recorded", file=sys.stderr)
        return 2
    print(f"record_gpu: wrote {record(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
