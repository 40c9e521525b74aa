"""Single-device benchmark: chapter 1's calibrated step-time prediction against real steps.

    .venv/bin/python -m benchmarks.single_device [--quick]

Chapter 1's model (an MLP 32 -> 256 x 3 -> 10, Adam) is trained on this machine at the
batch sizes of its sweep (16, 64, 256, 1024), twice, 24 steps each; `calibrate_device`
calibrates the device first, as the notebook does, and dpsim simulates each step. The relative error
|predicted / measured - 1| is recorded per batch size and trial, against the fastest step
(the one other programs disturbed least: the goal, median <= 15 %) and against the median
step (which includes the machine's load). The phases (forward, backward, optimizer) are
recorded beside them. The machine's load average is recorded before and after.

Writes benchmarks/results/single_device.json (every number measured in this one run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.goals import stamp

RESULTS = Path(__file__).resolve().parent / "results" / "single_device.json"
BATCH_SIZES = (16, 64, 256, 1024)  # notebooks/01_single_device.ipynb's sweep
TRIALS = 3
SWEEPS = 2  # each trial sweeps twice; per batch size, the sweep with the fastest step counts
STEPS = 24  # steps per batch size and sweep (the notebook runs 8)


def _trial(steps: int) -> dict[str, Any]:
    """One calibration, then one sweep; predicted and measured seconds per batch size."""
    import torch

    from dpsim.labs.ch01_single_device.sweep import batch_sweep
    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.data import classification
    from dpsim.runtime.device_calibration import calibrate_device
    from dpsim.runtime.models import mlp
    from dpsim.sim import SingleConfig, optimizer_time_s, simulate, step_result

    dataset = classification(n_samples=4096, n_features=32, n_classes=10, seed=0)
    device = calibrate_device("cpu")
    sweeps = [batch_sweep(lambda: mlp(32, 256, 3, 10), dataset, BATCH_SIZES, steps=steps,
                          device="cpu") for _ in range(SWEEPS)]
    runs = {b: min((s[b] for s in sweeps), key=lambda r: r.fastest_step_time_s)
            for b in BATCH_SIZES}
    rows = []
    for b in BATCH_SIZES:
        workload = workload_from_module(mlp(32, 256, 3, 10), torch.randn(b, 32))
        predicted = step_result(simulate(workload, device, SingleConfig(batch_size=b))).step_s
        run = runs[b]
        rows.append({
            "batch_size": b, "predicted_step_s": predicted,
            "fastest_step_s": run.fastest_step_time_s, "median_step_s": run.step_time_s,
            "error_vs_fastest": abs(predicted / run.fastest_step_time_s - 1),
            "error_vs_median": abs(predicted / run.step_time_s - 1),
            "predicted_optimizer_s": optimizer_time_s(workload.n_params,
                                                      workload.n_param_tensors, device),
            "measured_phase_median_s": run.phase_s,
        })
    return {"device": asdict(device), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    """Run the trials and write the JSON result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one trial (a smoke run)")
    args = parser.parse_args(argv)

    import torch

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = time.perf_counter()
    trials = [_trial(steps=STEPS) for _ in range(1 if args.quick else TRIALS)]
    cases = [(row["error_vs_fastest"], row["batch_size"], t)
             for t, trial in enumerate(trials) for row in trial["rows"]]
    worst = max(cases)
    result = {
        "benchmark": "single_device",
        "batch_sizes": list(BATCH_SIZES),
        "prediction_error_median": statistics.median(c[0] for c in cases),
        "prediction_error_worst": worst[0],
        "prediction_error_worst_config": {"batch": worst[1], "trial": worst[2]},
        "prediction_error_median_vs_median_step": statistics.median(
            row["error_vs_median"] for trial in trials for row in trial["rows"]),
        "prediction_error_goal": 0.15,
        "trials": trials,
        "machine": {
            "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "threads": torch.get_num_threads(), "load_average": load_before,
            "load_average_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "seconds": time.perf_counter() - started,
        "quick": args.quick,
    }
    stamp(result, "single_device")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"prediction error vs the fastest step: median {result['prediction_error_median']:.1%}"
          f", worst {worst[0]:.1%} (batch {worst[1]}, trial {worst[2]}; goal median <= 15 %)")
    print(f"prediction error vs the median step: median "
          f"{result['prediction_error_median_vs_median_step']:.1%}")
    for t, trial in enumerate(trials):
        for r in trial["rows"]:
            print(f"  trial {t} batch {r['batch_size']:>4}: predicted "
                  f"{r['predicted_step_s'] * 1e3:7.2f} ms, fastest {r['fastest_step_s'] * 1e3:7.2f}"
                  f" ms, median {r['median_step_s'] * 1e3:7.2f} ms; optimizer predicted "
                  f"{r['predicted_optimizer_s'] * 1e3:.2f} ms, measured "
                  f"{r['measured_phase_median_s']['optimizer'] * 1e3:.2f} ms")
    print(f"load average before {load_before}, after {result['machine']['load_average_after']}")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
