"""Collectives benchmark: the hand-written ring vs dist.all_reduce, and the calibrated model.

    .venv/bin/python -m benchmarks.collectives [--quick]

1. Bandwidth: on 2 and 4 gloo ranks, `ring_all_reduce_` and `dist.all_reduce` are timed in
   turn at every size from 1 KiB to 64 MiB (median of the slowest rank; 7 repeats, 21 up
   to 1 MiB); the ratio
   algbw(hand) / algbw(dist.all_reduce) = t_torch / t_hand at 16 and 64 MiB
   (goal: >= 0.7 at 64 MiB).
2. Model: the alpha-beta ring model is fitted to the dist.all_reduce times of each world
   size (`fit_alpha_beta`); median relative error of its predictions over 1 KiB .. 64 MiB
   (goal: <= 15 %), in-sample and held out (fitted on every other size, tested on the rest).
Both are computed from the median of the repeats and from their minimum (less sensitive to
other programs running on a shared machine). The bandwidth ratio's goal reads the median;
the model's goal reads the minimum, the statistic `link_calibration.measure_link` fits
(other programs only ever make a collective slower).

Writes benchmarks/results/collectives.json (every number measured in this one run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.goals import stamp

RESULTS = Path(__file__).resolve().parent / "results" / "collectives.json"
WORLD_SIZES = (2, 4)
MiB = 2**20


def _held_out_error(sizes: list[int], times: list[float], world_size: int) -> float:
    from dpsim.runtime.link_calibration import fit_alpha_beta
    from dpsim.sim import collective_time_s

    fit = fit_alpha_beta(sizes[::2], times[::2], world_size)
    errors = [abs(collective_time_s("all_reduce", s, world_size, fit.link) - t) / t
              for s, t in zip(sizes[1::2], times[1::2], strict=True)]
    return statistics.median(errors)


def _summary(world_size: int, sizes: list[int], hand: dict[int, float],
             ref: dict[int, float]) -> dict[str, Any]:
    """Ratios at 16/64 MiB and the calibrated model's errors, from one statistic's times."""
    from dataclasses import asdict

    from dpsim.runtime.link_calibration import fit_alpha_beta

    torch_times = [ref[s] for s in sizes]
    fit = fit_alpha_beta(sizes, torch_times, world_size, name="gloo on this machine")
    fit_hand = fit_alpha_beta(sizes, [hand[s] for s in sizes], world_size,
                              name="hand ring on this machine")
    return {
        "hand_s": [hand[s] for s in sizes],
        "torch_s": torch_times,
        "algbw_ratio_hand_over_torch": [ref[s] / hand[s] for s in sizes],
        "ratio_16MiB": ref[16 * MiB] / hand[16 * MiB] if 16 * MiB in ref else None,
        "ratio_64MiB": ref[64 * MiB] / hand[64 * MiB] if 64 * MiB in ref else None,
        "calibrated_link": asdict(fit.link),
        "model_median_error": fit.median_error,
        "model_errors": fit.errors,
        "model_median_error_held_out": _held_out_error(sizes, torch_times, world_size),
        "hand_model_median_error": fit_hand.median_error,
        "hand_calibrated_link": asdict(fit_hand.link),
    }


def samples_rank(rank: int, world_size: int, sizes: list[int], repeats: int
                 ) -> dict[str, dict[int, list[float]]]:
    """On one rank: timed samples per size; sizes up to 1 MiB (cheap, noisier) get 3x more."""
    from dpsim.runtime.collective_workers import time_all_reduce_samples

    impls = ["hand", "torch"]
    small = time_all_reduce_samples(rank, world_size, [s for s in sizes if s <= MiB],
                                    3 * repeats, impls)
    large = time_all_reduce_samples(rank, world_size, [s for s in sizes if s > MiB],
                                    repeats, impls)
    return {impl: {**small[impl], **large[impl]} for impl in impls}


def run(world_size: int, sizes: list[int], repeats: int) -> dict[str, Any]:
    """Time both implementations on `world_size` ranks (one launch); summarise two ways."""
    from dpsim.runtime.launch import launch

    samples = launch(samples_rank, world_size, args=(sizes, repeats), backend="gloo",
                     timeout_s=600)[0]
    out: dict[str, Any] = {"world_size": world_size, "sizes_bytes": sizes}
    for name, stat in (("median", statistics.median), ("min", min)):
        hand = {s: stat(v) for s, v in samples["hand"].items()}
        ref = {s: stat(v) for s, v in samples["torch"].items()}
        out[name] = _summary(world_size, sizes, hand, ref)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run both measurements on 2 and 4 ranks and write the JSON result file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args(argv)

    import torch

    from dpsim.runtime.link_calibration import BENCHMARK_SIZES

    sizes = list(BENCHMARK_SIZES)  # 1 KiB .. 64 MiB, x4
    if args.quick:
        sizes = [s for s in sizes if s in (1024, 64 * 1024, MiB, 16 * MiB, 64 * MiB)]
    repeats = 3 if args.quick else 7
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = time.perf_counter()
    runs = [run(n, sizes, repeats) for n in WORLD_SIZES]
    result = {
        "benchmark": "collectives",
        "backend": "gloo",
        "repeats": repeats,
        "repeats_up_to_1MiB": 3 * repeats,
        "ratio_goal_64MiB": 0.7,
        "model_error_goal": 0.15,
        "runs": runs,
        "machine": {
            "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "seconds": time.perf_counter() - started,
        "quick": args.quick,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    stamp(result, "collectives")  # goals, value, goal_met, median and worst case
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    for run_ in runs:
        for stat in ("median", "min"):
            r = run_[stat]
            print(f"{run_['world_size']} ranks ({stat} of {repeats}): algbw hand/dist.all_reduce"
                  f" = {r['ratio_16MiB']:.2f} at 16 MiB, {r['ratio_64MiB']:.2f} at 64 MiB "
                  f"(goal >= 0.7); model median error {r['model_median_error']:.1%} "
                  f"in-sample, {r['model_median_error_held_out']:.1%} held out (goal <= 15 %);"
                  f" alpha {r['calibrated_link']['latency_us']:.0f} us, "
                  f"B {r['calibrated_link']['bandwidth_GBps']:.2f} GB/s")
    print(f"load average before/after: {load_before} / {result['machine']['load_average_after']}")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
