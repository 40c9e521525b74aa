"""Part 1 of benchmarks/ddp.py: what the recorder adds to a DDP step, beside torch's own hook.

On 2 gloo ranks three DDP copies of one model train the same batch, one step of each in
turn after warm-up steps (the order goes through all six permutations, so no copy always
runs first): plain DDP, DDP with torch's own Python comm hook (`allreduce_hook` from
torch.distributed.algorithms.ddp_comm_hooks.default_hooks, the reference hook that "won't
change behavior of DDP"), and DDP with `DDPRecorder` attached.

Overhead of a configuration = median over the rounds of (recorded step / plain step) - 1,
the steps of a round run back to back so that a change in the machine's load reaches all
three (the ratio of the median steps and of the fastest steps are recorded beside it).
The rounds of `OVERHEAD_LAUNCHES` launches (fresh processes) are pooled: one launch's value
moves by up to 3 points from the next one's; each launch's value is recorded.

torch's own hook is the floor for any recorder that times each bucket's all-reduce with a
Python comm hook: DDP then makes a Python call and a Python future callback per bucket and
divides the bucket by the world size in a pass of its own (without a hook it divides while
copying gradients into the bucket). gloo offers no other per-bucket completion time in
torch 2.13 (tests/runtime/test_gloo_timing.py). The recorder's overhead beyond that floor is
(recorded step / step with torch's hook) - 1, per round.
"""

from __future__ import annotations

import os
import statistics
from itertools import permutations
from typing import Any

OVERHEAD_LAUNCHES = 2  # launches of part 1, their rounds pooled
PAIRS = 300  # rounds (one step of each copy) per configuration and launch
WARMUP_PAIRS = 3  # DDP rebuilds its buckets in step 2
VARIANTS = ("plain", "python_hook", "recorded")
OVERHEAD_DEFINITION = ("per configuration: median over back-to-back rounds of (recorded step / "
                       f"plain step) - 1, the rounds of {OVERHEAD_LAUNCHES} launches pooled")
FLOOR_DEFINITION = ("the same for DDP with torch's own allreduce_hook (ddp_comm_hooks."
                    "default_hooks): the least a Python comm hook adds to a DDP step")


def load_average() -> float | None:
    """The 1-minute load average, where the platform has one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def overhead_rank(rank: int, world_size: int, cfgs: list[Any], pairs: int
                  ) -> list[dict[str, list[float]]]:
    """Per config: step seconds of each variant, one step of each in turn."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpsim.labs.ch05_ddp.ddp_recorder import DDPRecorder, timed_step
    from dpsim.labs.ch05_ddp.ddp_train import build_dataset, build_model
    from dpsim.runtime.optimizers import build_optimizer

    orders = list(permutations(VARIANTS))
    out = []
    for cfg in cfgs:
        x, y = (t[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
                for t in build_dataset(cfg).tensors)
        runs = {}
        for name in VARIANTS:
            ddp = DDP(build_model(cfg), bucket_cap_mb=cfg.bucket_cap_mb)
            if name == "python_hook":
                ddp.register_comm_hook(None, allreduce_hook)
            recorder = DDPRecorder(ddp) if name == "recorded" else None
            runs[name] = (ddp, recorder, build_optimizer(cfg.optimizer, ddp.parameters(), cfg.lr))
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for pair in range(pairs + WARMUP_PAIRS):
            for name in orders[pair % len(orders)]:
                ddp, recorder, opt = runs[name]
                step_s = timed_step(ddp, opt, x, y, recorder)
                if pair >= WARMUP_PAIRS:
                    times[name].append(step_s)
        out.append(times)
    return out


def _ratio(over: list[float], under: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(over, under, strict=True)) - 1


def overhead(times: dict[str, Any]) -> dict[str, Any]:
    """The recorder's overhead and the floor from interleaved steps (fractions)."""
    plain, hook, recorded = times["plain"], times["python_hook"], times["recorded"]
    per_launch: dict[str, Any] = {key: times[key] for key in ("overhead_per_launch",
                                              "python_hook_overhead_per_launch")
                  if key in times}
    return {**per_launch,
            "overhead": _ratio(recorded, plain),
            "python_hook_overhead": _ratio(hook, plain),
            "beyond_python_hook": _ratio(recorded, hook),
            "overhead_of_medians": statistics.median(recorded) / statistics.median(plain) - 1,
            "overhead_of_fastest": min(recorded) / min(plain) - 1,
            "plain_step_s": statistics.median(plain),
            "python_hook_step_s": statistics.median(hook),
            "recorded_step_s": statistics.median(recorded),
            "pairs": len(plain)}


def measure_overhead(cfgs: list[Any], world_size: int, quick: bool
                     ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Part 1 in OVERHEAD_LAUNCHES launches, each config's rounds pooled, with the load
    average before and after (`loads`)."""
    from dpsim.runtime.launch import launch

    loads = {"before_overhead": load_average()}
    launches = [launch(overhead_rank, world_size, args=(cfgs, 20 if quick else PAIRS),
                       backend="gloo", timeout_s=600)[0] for _ in range(OVERHEAD_LAUNCHES)]
    loads["after_overhead"] = load_average()
    pooled = []
    for runs in zip(*launches, strict=True):
        each = [overhead(run) for run in runs]
        pooled.append({name: [t for run in runs for t in run[name]] for name in VARIANTS}
                      | {"overhead_per_launch": [e["overhead"] for e in each],
                         "python_hook_overhead_per_launch": [
                             e["python_hook_overhead"] for e in each]})
    return [overhead(times) for times in pooled], loads


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The result file's part-1 fields from rows that carry a "recorder" entry."""
    over = max(rows, key=lambda r: r["recorder"]["overhead"])
    floor = max(rows, key=lambda r: r["recorder"]["python_hook_overhead"])
    return {
        "recorder_overhead_definition": OVERHEAD_DEFINITION,
        "recorder_overhead_worst": over["recorder"]["overhead"],
        "recorder_overhead_worst_config": over["config"],
        "recorder_overhead_median": statistics.median(r["recorder"]["overhead"] for r in rows),
        "recorder_overhead_goal": 0.05,
        "python_hook_overhead_definition": FLOOR_DEFINITION,
        "python_hook_overhead_worst": floor["recorder"]["python_hook_overhead"],
        "python_hook_overhead_worst_config": floor["config"],
        "python_hook_overhead_median": statistics.median(
            r["recorder"]["python_hook_overhead"] for r in rows),
        "recorder_beyond_python_hook_median": statistics.median(
            r["recorder"]["beyond_python_hook"] for r in rows),
    }
