"""DDP benchmark: the recorder's overhead, and how well a calibrated simulation predicts DDP.

    .venv/bin/python -m benchmarks.ddp [--quick] [--overhead-only]

`--overhead-only` reruns part 1 and keeps part 2's numbers from the results file.

1. Overhead (benchmarks/ddp_overhead.py): on 2 gloo ranks, plain DDP, DDP with torch's
   own Python comm hook and DDP with `DDPRecorder` attached train the same batch, one step
   of each in turn. Overhead = median over the rounds of (recorded step / plain step) - 1,
   the rounds of two launches pooled; torch's own hook, measured beside it, is the floor
   for any recorder built on a Python comm hook. Goal: <= 5 % on every configuration.
2. Prediction: in one launch the ranks calibrate this machine (`calibrate_device`: FLOP/s,
   memory bandwidth and per-operator cost of one rank's thread, the fastest of repeats in
   the thread's CPU time; `measure_link`: gloo all-reduce alpha and beta from the fastest
   of repeats; `measure_ddp_step_overhead_s`: DDP's own host work per step, from a tiny
   model that is none of the configurations), time each configuration's step without DDP
   (`measure_local_step_s`, thread CPU time), then time its plain DDP steps.
   `DDPRecording.predict` simulates each DDP step with the real buckets, the calibrated
   Link and the Device scaled so that its compute equals the step without DDP
   (`scaled_device`): what is predicted is what DDP adds to a single process's step. On
   this CPU the ranks' compute threads take every core, so the all-reduces do not hide
   behind backward (`dpsim.sim.cost.compute_contention`). Error = |predicted / fastest measured
   DDP step - 1| (the step other programs disturbed least, as in
   benchmarks/single_device.py); beside it the error against the median step and the
   error with the roofline-calibrated compute (no step without DDP). Nothing is fitted
   to the measured DDP steps: every error is a prediction error. Repeated in `TRIALS`
   launches, calibration included; the goal is the median over every configuration and
   trial (<= 15 %).

The 1-minute load average before and after each launch is recorded: other programs on
the machine slow the measured steps, the calibration much less (see the report).
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

from benchmarks.ddp_overhead import load_average, measure_overhead, summary
from benchmarks.goals import stamp

RESULTS = Path(__file__).resolve().parent / "results" / "ddp.json"
WORLD_SIZE = 2
TRIALS = 3


def _configs() -> list[Any]:
    from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig

    base = DDPRunConfig(steps=30, progress=False, optimizer="sgd")
    return [
        replace(base, hidden=128, depth=2, batch_size=32),
        replace(base, hidden=512, depth=3, batch_size=32),
        replace(base, hidden=512, depth=3, batch_size=32, bucket_cap_mb=0.25),
        replace(base, hidden=1024, depth=2, batch_size=64),
        replace(base, hidden=1024, depth=3, batch_size=16, bucket_cap_mb=1.0),
        replace(base, model="cnn", hidden=32, depth=3, batch_size=32),
        replace(base, model="cnn", hidden=64, depth=2, batch_size=32, n_features=192),
    ]


def predict_rank(rank: int, world_size: int, cfgs: list[Any]) -> dict[str, Any]:
    """Calibrate this machine on every rank at once, then time plain DDP steps per config."""
    from dpsim.labs.ch05_ddp.ddp_recorder import (
        measure_ddp_step_overhead_s,
        measure_link,
        record_rank,
    )
    from dpsim.labs.ch05_ddp.ddp_train import build_dataset, build_model
    from dpsim.runtime.device_calibration import calibrate_device, measure_local_step_s

    link = measure_link()
    device = calibrate_device("cpu")
    overhead_s = measure_ddp_step_overhead_s(rank, world_size, device, link)
    local = []  # each config's step without DDP: its compute as this CPU runs it
    for cfg in cfgs:
        x, y = build_dataset(cfg).tensors
        local.append(measure_local_step_s(build_model(cfg), x[:cfg.batch_size],
                                          y[:cfg.batch_size], cfg.optimizer, cfg.lr))
    runs = [record_rank(rank, world_size, cfg, warmup=3, record=False) for cfg in cfgs]
    return {"device": device, "link": link, "step_overhead_s": overhead_s, "runs": runs,
            "local_step_s": local}


def _predictions(cfgs: list[Any], trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per config and trial: measured (fastest and median step of rank 0) and predicted,
    with the roofline-calibrated device and with its compute anchored on the local step."""
    from dpsim.labs.ch05_ddp.ddp_recorder import DDPRecording
    from dpsim.labs.ch05_ddp.ddp_train import build_dataset, build_model
    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.device_calibration import scaled_device
    from dpsim.sim import buckets_of, step_compute_s, step_result

    rows = []
    for i, cfg in enumerate(cfgs):
        workload = workload_from_module(build_model(cfg), build_dataset(cfg).tensors[0][
            :cfg.batch_size])
        runs = []
        for trial in trials:
            measured = trial["ranks"]
            recording = DDPRecording(cfg, [m["runs"][i] for m in measured])
            device, link = measured[0]["device"], measured[0]["link"]
            local = max(m["local_step_s"][i] for m in measured)
            factor = local / step_compute_s(workload, cfg.batch_size, device,
                                            optimizer=cfg.optimizer)
            roofline = step_result(recording.predict(
                device, link, step_overhead_s=measured[0]["step_overhead_s"]))
            trace = recording.predict(scaled_device(device, factor), link,
                                      step_overhead_s=measured[0]["step_overhead_s"])
            result = step_result(trace)
            times = recording.ranks[0].step_times_s
            runs.append({"fastest": min(times), "median": statistics.median(times),
                         "predicted": result.step_s, "roofline": roofline.step_s,
                         "exposed": result.exposed_comm_s, "compute": result.compute_s,
                         "local": local, "factor": factor,
                         "n_buckets": len(buckets_of(trace)),
                         "overlap": recording.overlaps(device)})
        rows.append(_row(cfg, runs))
    return rows


def _row(cfg: Any, runs: list[dict[str, Any]]) -> dict[str, Any]:
    def each(key: str) -> list[Any]:
        return [r[key] for r in runs]

    return {
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("progress",)},
        "n_buckets_predicted": runs[0]["n_buckets"],
        "comm_overlaps_compute": runs[0]["overlap"],
        "fastest_step_s": each("fastest"), "median_step_s": each("median"),
        "local_step_s": each("local"), "compute_vs_roofline": each("factor"),
        "predicted_step_s": each("predicted"),
        "predicted_compute_s": each("compute"),
        "predicted_exposed_comm_s": each("exposed"),
        "predicted_step_s_roofline_compute": each("roofline"),
        "errors": [abs(r["predicted"] / r["fastest"] - 1) for r in runs],
        "errors_vs_median_step": [abs(r["predicted"] / r["median"] - 1) for r in runs],
        "errors_roofline_compute": [abs(r["roofline"] / r["fastest"] - 1) for r in runs],
    }


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and write the JSON result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--overhead-only", action="store_true",
                        help="rerun the recorder's overhead only; keep the prediction part "
                             "of the results file as it is")
    args = parser.parse_args(argv)
    if args.overhead_only:
        return _rerun_overhead(args.quick)

    import torch

    from dpsim.runtime.launch import launch

    cfgs = _configs()
    started = time.perf_counter()
    per_config, loads = measure_overhead(cfgs, WORLD_SIZE, args.quick)
    trials: list[dict[str, Any]] = []
    for _ in range(1 if args.quick else TRIALS):
        load = load_average()
        ranks = launch(predict_rank, WORLD_SIZE, args=(cfgs,), backend="gloo", timeout_s=600)
        trials.append({"ranks": ranks, "load_before": load, "load_after": load_average()})
    rows = _predictions(cfgs, trials)
    for row, recorder in zip(rows, per_config, strict=True):
        row["recorder"] = recorder
    result = _result(rows, trials, loads, args.quick)
    result["machine"].update(torch=torch.__version__, threads_per_rank=trials[0]["ranks"][0][
        "runs"][0].threads)
    result["seconds"] = time.perf_counter() - started
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    stamp(result, "ddp")  # goals, value, goal_met, median and worst case
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    _report(result)
    return 0


def _rerun_overhead(quick: bool) -> int:
    """Replace part 1's numbers in the results file; part 2's stay as they were measured."""
    started = time.perf_counter()
    result = json.loads(RESULTS.read_text())
    per_config, loads = measure_overhead(_configs(), WORLD_SIZE, quick)
    for row, recorder in zip(result["rows"], per_config, strict=True):
        row["recorder"] = recorder
    result.update(summary(result["rows"]),
                  recorder_overhead_seconds=time.perf_counter() - started,
                  quick=quick or result["quick"])
    machine = result["machine"]
    machine["loads"].update(loads)
    every_load = [x for x in (*machine["loads"].values(), *(
        x for pair in result["trial_loads"] for x in pair)) if x is not None]
    machine.update(load_average=max(every_load), load_average_min=min(every_load))
    stamp(result, "ddp")
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    _report(result)
    return 0


def _result(rows: list[dict[str, Any]], trials: list[dict[str, Any]], loads: dict[str, Any],
            quick: bool) -> dict[str, Any]:
    errors = [(e, row["config"], t) for row in rows for t, e in enumerate(row["errors"])]
    worst = max(errors, key=lambda x: x[0])
    every_load = [x for x in (*loads.values(), *(t["load_before"] for t in trials),
                              *(t["load_after"] for t in trials)) if x is not None]
    return {
        "benchmark": "ddp",
        "world_size": WORLD_SIZE,
        "backend": "gloo",
        **summary(rows),
        "prediction_error_definition": "|predicted / fastest measured DDP step - 1| per "
                                       "configuration and trial; compute anchored on the "
                                       "step without DDP; nothing fitted to the DDP steps",
        "prediction_error_median": statistics.median(e for e, _, _ in errors),
        "prediction_error_worst": worst[0],
        "prediction_error_worst_config": {**worst[1], "trial": worst[2]},
        "prediction_error_median_per_trial": [
            statistics.median(r["errors"][t] for r in rows) for t in range(len(trials))],
        "prediction_error_median_vs_median_step": statistics.median(
            e for r in rows for e in r["errors_vs_median_step"]),
        "prediction_error_median_roofline_compute": statistics.median(
            e for r in rows for e in r["errors_roofline_compute"]),
        "prediction_error_goal": 0.15,
        "calibrated_devices": [asdict(t["ranks"][0]["device"]) for t in trials],
        "calibrated_links": [asdict(t["ranks"][0]["link"]) for t in trials],
        "calibrated_ddp_step_overhead_s": [t["ranks"][0]["step_overhead_s"] for t in trials],
        "trial_loads": [[t["load_before"], t["load_after"]] for t in trials],
        "rows": rows,
        "machine": {
            "platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "load_average": max(every_load, default=None),
            "load_average_min": min(every_load, default=None), "loads": loads,
        },
        "quick": quick,
    }


def _report(result: dict[str, Any]) -> None:
    print(f"recorder overhead: worst {result['recorder_overhead_worst']:+.1%}, median "
          f"{result['recorder_overhead_median']:+.1%} (goal: every config <= 5 %); torch's own "
          f"Python hook: worst {result['python_hook_overhead_worst']:+.1%}, median "
          f"{result['python_hook_overhead_median']:+.1%}")
    print(f"prediction error vs the fastest step: median {result['prediction_error_median']:.1%}"
          f", worst {result['prediction_error_worst']:.1%} (goal median <= 15 %); vs the "
          f"median step {result['prediction_error_median_vs_median_step']:.1%}; with the "
          f"roofline compute {result['prediction_error_median_roofline_compute']:.1%}")
    for r in result["rows"]:
        c = r["config"]
        print(f"  {c['model']} h{c['hidden']} d{c['depth']} b{c['batch_size']} "
              f"cap {c['bucket_cap_mb']}: fastest " + ", ".join(
                  f"{m * 1e3:.2f}" for m in r["fastest_step_s"]) + " ms; predicted " +
              ", ".join(f"{p * 1e3:.2f}" for p in r["predicted_step_s"]) +
              f" ms; recorder {r['recorder']['overhead']:+.1%}, torch's hook "
              f"{r['recorder']['python_hook_overhead']:+.1%}")
    print(f"1-min load average: {result['machine']['load_average_min']:.1f} to "
          f"{result['machine']['load_average']:.1f}; wrote {RESULTS}")


if __name__ == "__main__":
    raise SystemExit(main())
