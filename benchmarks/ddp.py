"""DDP benchmark: the recorder's overhead, and how well a calibrated simulation predicts DDP.

    .venv/bin/python -m benchmarks.ddp [--quick]

1. Overhead: on 2 gloo ranks, a plain DDP model and one with `DDPRecorder` attached
   (comm hook + per-parameter gradient hooks) train the same step, one step of each in
   turn; overhead = median recorded step / median plain step - 1 (goal: <= 5 %).
2. Prediction: in one launch the ranks calibrate this machine (achieved FLOP/s, memory
   bandwidth and per-operator overhead per rank, and the gloo all-reduce's alpha and beta),
   then time plain DDP steps of several models; `dpsim.strategies.ddp.simulate` with the
   calibrated Device and Link predicts each step time (goal: median error <= 20 %). This
   is repeated in `TRIALS` launches (calibration included), since a small CPU machine's
   gloo latency varies from minute to minute; the median is over every config and trial.

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

from benchmarks.goals import stamp

RESULTS = Path(__file__).resolve().parent / "results" / "ddp.json"
WORLD_SIZE = 2
TRIALS = 3
CALIBRATIONS = 5


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


def overhead_rank(rank: int, world_size: int, cfgs: list[Any], pairs: int
                  ) -> list[dict[str, float]]:
    """Per config: median step seconds of plain and recorded DDP, one step of each in turn."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpsim.runtime.ddp_recorder import DDPRecorder, timed_step
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
        for pair in range(pairs + 3):  # 3 warm-up pairs (DDP rebuilds its buckets in step 2)
            for name, (ddp, recorder, opt) in runs.items():
                step_s = timed_step(ddp, opt, x, y, recorder)
                if pair >= 3:
                    times[name].append(step_s)
        out.append({k: statistics.median(v) for k, v in times.items()})
    return out


def predict_rank(rank: int, world_size: int, cfgs: list[Any]) -> dict[str, Any]:
    """Calibrate this machine on every rank at once, then time plain DDP steps per config.

    The calibration's short timings vary from run to run on a small machine, so each
    figure is the median of CALIBRATIONS calibrations, and the link gets 16 repeats.
    """
    from dpsim.runtime.calibrate import calibrate_device
    from dpsim.runtime.ddp_recorder import measure_link, record_rank

    link = measure_link(repeats=16)
    devices = [calibrate_device("cpu") for _ in range(CALIBRATIONS)]
    device = replace(devices[0], **{
        k: statistics.median(getattr(d, k) for d in devices)
        for k in ("fp32_tflops", "bf16_tflops", "mem_bw_GBps", "op_overhead_us")})
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
    from dpsim.strategies.ddp import buckets_of, step_result

    cfgs = _configs()
    pairs = 20 if args.quick else 100
    started = time.perf_counter()
    overhead = launch(overhead_rank, WORLD_SIZE, args=(cfgs, pairs), backend="gloo",
                      timeout_s=600)[0]
    trials = []
    for _ in range(1 if args.quick else TRIALS):
        measured = launch(predict_rank, WORLD_SIZE, args=(cfgs,), backend="gloo",
                          timeout_s=600)
        trials.append(measured)
    rows = []
    for i, cfg in enumerate(cfgs):
        runs = []
        for measured in trials:
            device, link = measured[0]["device"], measured[0]["link"]
            recording = DDPRecording(cfg, [m["runs"][i] for m in measured])
            trace = recording.predict(device, link)
            runs.append({"measured_step_s": recording.step_time_s,
                         "predicted_step_s": step_result(trace).step_s,
                         "n_buckets": len(buckets_of(trace))})
        errors = [abs(r["predicted_step_s"] - r["measured_step_s"]) / r["measured_step_s"]
                  for r in runs]
        rows.append({
            "config": {k: v for k, v in asdict(cfg).items() if k not in ("progress",)},
            "n_buckets_predicted": runs[0]["n_buckets"],
            "measured_step_s": [r["measured_step_s"] for r in runs],
            "predicted_step_s": [r["predicted_step_s"] for r in runs],
            "errors": errors,
            "error": statistics.median(errors),
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
        "prediction_error_median": statistics.median(e for r in rows for e in r["errors"]),
        "prediction_error_median_per_trial": [
            statistics.median(r["errors"][t] for r in rows) for t in range(len(trials))],
        "prediction_error_goal": 0.20,
        "calibrated_devices": [asdict(m[0]["device"]) for m in trials],
        "calibrated_links": [asdict(m[0]["link"]) for m in trials],
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
    stamp(result, "ddp")  # goals, value, goal_met, median and worst case
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"recorder overhead (median): {result['recorder_overhead_median']:+.1%} "
          f"(goal <= 5 %)")
    print(f"prediction error (median): {result['prediction_error_median']:.1%} (goal <= 20 %)")
    for r in rows:
        c = r["config"]
        print(f"  {c['model']} h{c['hidden']} d{c['depth']} b{c['batch_size']} "
              f"cap {c['bucket_cap_mb']}: measured {r['measured_step_s'][0] * 1e3:.2f} ms, "
              f"predicted {r['predicted_step_s'][0] * 1e3:.2f} ms (median error "
              f"{r['error']:.0%}), "
              f"recorder {r['recorder_overhead']:+.1%}")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
