"""DDP benchmark: the recorder's overhead, and how well a calibrated simulation predicts DDP.

    .venv/bin/python -m benchmarks.ddp [--quick]

1. Overhead: on 2 gloo ranks, a plain DDP model and one with `DDPRecorder` attached
   (comm hook + per-parameter gradient hooks) train the same step, in alternating blocks;
   overhead = median recorded step / median plain step - 1 (goal: <= 5 %).
2. Prediction: in one launch the ranks calibrate this machine (achieved FLOP/s, memory
   bandwidth and per-operator overhead per rank, and the gloo all-reduce's alpha and beta),
   then time plain DDP steps of several models; `dpsim.strategies.ddp.simulate` with the
   calibrated Device and Link predicts each step time (goal: median error <= 20 %).

Writes benchmarks/results/ddp.json (every number measured in this one run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "ddp.json"
WORLD_SIZE = 2


def _configs() -> list[Any]:
    from dpsim.runtime.ddp_train import DDPRunConfig

    base = DDPRunConfig(steps=20, progress=False, optimizer="sgd")
    return [
        replace(base, hidden=128, depth=2, batch_size=32),
        replace(base, hidden=512, depth=3, batch_size=32),
        replace(base, hidden=512, depth=3, batch_size=32, bucket_cap_mb=0.25),
        replace(base, hidden=1024, depth=2, batch_size=64),
        replace(base, hidden=1024, depth=3, batch_size=16, bucket_cap_mb=1.0),
        replace(base, model="cnn", hidden=32, depth=3, batch_size=32),
        replace(base, model="cnn", hidden=64, depth=2, batch_size=32, n_features=192),
    ]


def overhead_rank(rank: int, world_size: int, cfgs: list[Any], blocks: int, steps: int
                  ) -> list[dict[str, float]]:
    """Per config: median step seconds of plain and recorded DDP, alternating blocks."""
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpsim.runtime.ddp_recorder import DDPRecorder
    from dpsim.runtime.ddp_train import build_dataset, build_model
    from dpsim.runtime.optimizers import build_optimizer

    out = []
    for cfg in cfgs:
        x, y = (t[rank * cfg.batch_size:(rank + 1) * cfg.batch_size]
                for t in build_dataset(cfg).tensors)
        runs = {}
        for name in ("plain", "recorded"):
            ddp = DDP(build_model(cfg), bucket_cap_mb=cfg.bucket_cap_mb)
            recorder = DDPRecorder(ddp) if name == "recorded" else None
            runs[name] = (ddp, recorder, build_optimizer(cfg.optimizer, ddp.parameters(), cfg.lr))
        times: dict[str, list[float]] = {"plain": [], "recorded": []}
        for block in range(blocks + 1):  # block 0 warms both up (and rebuilds buckets)
            for name, (ddp, recorder, opt) in runs.items():
                for _ in range(steps):
                    dist.barrier()
                    if recorder is not None:
                        recorder.begin()
                    t0 = time.perf_counter()
                    opt.zero_grad(set_to_none=True)
                    loss = nn.functional.cross_entropy(ddp(x), y)
                    t1 = time.perf_counter()
                    loss.backward()
                    t2 = time.perf_counter()
                    opt.step()
                    t3 = time.perf_counter()
                    if recorder is not None:
                        recorder.end(t1, t2, t3)
                    if block:
                        times[name].append(t3 - t0)
        out.append({k: statistics.median(v) for k, v in times.items()})
    return out


def predict_rank(rank: int, world_size: int, cfgs: list[Any]) -> dict[str, Any]:
    """Calibrate this machine on every rank at once, then time plain DDP steps per config."""
    from dpsim.runtime.calibrate import calibrate_device
    from dpsim.runtime.ddp_recorder import measure_link, record_rank

    link = measure_link()
    device = calibrate_device("cpu")
    runs = [record_rank(rank, world_size, cfg, warmup=3, record=False) for cfg in cfgs]
    return {"device": device, "link": link, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and write the JSON result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    args = parser.parse_args(argv)

    import torch

    from dpsim.runtime.ddp_recorder import DDPRecording
    from dpsim.runtime.launch import launch

    cfgs = _configs()
    blocks, steps = (2, 5) if args.quick else (4, 15)
    started = time.perf_counter()
    overhead = launch(overhead_rank, WORLD_SIZE, args=(cfgs, blocks, steps), backend="gloo",
                      timeout_s=600)[0]
    measured = launch(predict_rank, WORLD_SIZE, args=(cfgs,), backend="gloo", timeout_s=600)
    device, link = measured[0]["device"], measured[0]["link"]
    rows = []
    for i, cfg in enumerate(cfgs):
        recording = DDPRecording(cfg, [m["runs"][i] for m in measured])
        predicted = recording.predict(device, link).meta["step_time_s"]
        rows.append({
            "config": {k: v for k, v in asdict(cfg).items() if k not in ("progress",)},
            "n_buckets_predicted": len(recording.predict(device, link).meta["buckets"]),
            "measured_step_s": recording.step_time_s,
            "predicted_step_s": predicted,
            "error": abs(predicted - recording.step_time_s) / recording.step_time_s,
            "recorder_overhead": overhead[i]["recorded"] / overhead[i]["plain"] - 1,
            "plain_step_s": overhead[i]["plain"],
            "recorded_step_s": overhead[i]["recorded"],
        })
    result = {
        "benchmark": "ddp",
        "world_size": WORLD_SIZE,
        "backend": "gloo",
        "recorder_overhead_median": statistics.median(r["recorder_overhead"] for r in rows),
        "recorder_overhead_goal": 0.05,
        "prediction_error_median": statistics.median(r["error"] for r in rows),
        "prediction_error_goal": 0.20,
        "calibrated_device": asdict(device),
        "calibrated_link": asdict(link),
        "rows": rows,
        "machine": {
            "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "seconds": time.perf_counter() - started,
        "quick": args.quick,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"recorder overhead (median): {result['recorder_overhead_median']:+.1%} "
          f"(goal <= 5 %)")
    print(f"prediction error (median): {result['prediction_error_median']:.1%} (goal <= 20 %)")
    for r in rows:
        c = r["config"]
        print(f"  {c['model']} h{c['hidden']} d{c['depth']} b{c['batch_size']} "
              f"cap {c['bucket_cap_mb']}: measured {r['measured_step_s'] * 1e3:.2f} ms, "
              f"predicted {r['predicted_step_s'] * 1e3:.2f} ms ({r['error']:.0%}), "
              f"recorder {r['recorder_overhead']:+.1%}")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
