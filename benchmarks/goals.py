"""Every benchmark's goals, in one shape, derived from the numbers its run recorded.

Each results file carries `goals`: a list of {goal, value, unit, target, better,
decided_by, goal_met, median, worst: {value, config}}, and a top-level `goal_met` that is
true only when every goal is met. `value` is what the goal is judged on (the median when
the goal is about a median, the worst case when it is about every case); the median and
the worst case with its configuration always stand beside it.

`python -m benchmarks.goals` re-derives the goals of every file in benchmarks/results from
the numbers already recorded there (nothing is re-measured); each benchmark's writer
calls `stamp` itself when it runs.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpsim.sim import fidelity

goal, fidelity_goals = fidelity.goal, fidelity.goals

RESULTS = Path(__file__).resolve().parent / "results"


def _collectives(r: dict[str, Any]) -> list[dict[str, Any]]:
    runs = r["runs"]
    ratios = {run["world_size"]: run["median"]["ratio_64MiB"] for run in runs}
    # the model is judged on the fastest of the repeats, the statistic calibration fits
    # (`link_calibration.measure_link`): other programs only ever make a collective slower
    errors = {run["world_size"]: run["min"]["model_median_error_held_out"] for run in runs}
    low = min(ratios, key=lambda k: ratios[k])
    high = max(errors, key=lambda k: errors[k])
    return [goal("hand ring / torch all-reduce bus bandwidth at 64 MiB >= 0.7, every world "
                 "size", ratios[low], r["ratio_goal_64MiB"], "ratio", "higher", "worst",
                 statistics.median(ratios.values()), ratios[low], {"world_size": low}),
            goal("alpha-beta model's held-out median error <= 15 % (fastest of the repeats), "
                 "every world size",
                 errors[high], r["model_error_goal"], "fraction", "lower", "worst",
                 statistics.median(errors.values()), errors[high], {"world_size": high})]


def _ddp(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [goal("recorder overhead <= 5 % of a step, every configuration",
                 r["recorder_overhead_worst"], r["recorder_overhead_goal"], "fraction",
                 "lower", "worst", r["recorder_overhead_median"],
                 r["recorder_overhead_worst"], r["recorder_overhead_worst_config"]),
            goal("median error of the DDP step predicted from the step without DDP <= 15 %",
                 r["prediction_error_median"], r["prediction_error_goal"], "fraction",
                 "lower", "median", r["prediction_error_median"], r["prediction_error_worst"],
                 r["prediction_error_worst_config"])]


def _single_device(r: dict[str, Any]) -> list[dict[str, Any]]:
    return [goal("median prediction error of chapter 1's calibrated step time <= 15 %",
                 r["prediction_error_median"], r["prediction_error_goal"], "fraction", "lower",
                 "median", r["prediction_error_median"], r["prediction_error_worst"],
                 r["prediction_error_worst_config"])]


def _fuzz(r: dict[str, Any]) -> list[dict[str, Any]]:
    per = r["per_entry_point"]
    name = max(per, key=lambda k: per[k]["failed"]) if per else None
    failed = per[name]["failed"] if name else 0
    return [goal(r["goal"], r["pct_right_field"], r["goal_pct_right_field"], "%", "higher",
                 "median", r["pct_right_field"], failed,
                 {"entry_point": name, "failed_calls": failed}),
            goal("no hang", r["hangs"], 0, "calls", "lower", "worst", r["hangs"], r["hangs"],
                 {"time_bound_s": r["time_bound_s"]}),
            goal("no garbage result", r["garbage"], 0, "calls", "lower", "worst", r["garbage"],
                 r["garbage"], {}),
            goal("every valid base call accepted", len(r["base_failures"]), 0, "calls", "lower",
                 "worst", len(r["base_failures"]), len(r["base_failures"]), {}),
            goal("every boundary name has a derived valid call, or a reason to skip",
                 len(r["coverage"]["uncovered"]), 0, "names", "lower", "worst",
                 len(r["coverage"]["uncovered"]), len(r["coverage"]["uncovered"]),
                 {"uncovered": r["coverage"]["uncovered"]})]


def _launch(r: dict[str, Any]) -> list[dict[str, Any]]:
    ways = r["ways"]
    every = [t for w in ways.values() for t in w["reaction_s"]]
    way = max(ways, key=lambda w: ways[w]["worst_s"])
    return [goal(r["goal"], ways[way]["worst_s"], r["goal_s"], "s", "lower", "worst",
                 statistics.median(every), ways[way]["worst_s"], {"way": way})]


def _planner(r: dict[str, Any]) -> list[dict[str, Any]]:
    updates = r["dashboard_updates"]
    worst = max(updates, key=lambda u: u["new_setting_ms"])
    fsdp_ms = r.get("fsdp_step_1024_devices_96_layers_cpu_ms",
                    r["fsdp_step_1024_devices_96_layers_ms"])  # CPU time where recorded
    median_ms = statistics.median(u["new_setting_ms"] for u in updates)
    return [goal(f"one FSDP step on 1024 devices, 96 layers <= {r['fsdp_goal_ms']:g} ms (CPU)",
                 fsdp_ms, r["fsdp_goal_ms"], "ms", "lower", "worst", fsdp_ms, fsdp_ms,
                 {"n_devices": 1024, "layers": 96}),
            goal(f"a dashboard update <= {r['dashboard_goal_ms']:g} ms at most settings "
                 "(median over settings)", median_ms, r["dashboard_goal_ms"], "ms", "lower",
                 "median", median_ms, worst["new_setting_ms"],
                 {k: v for k, v in worst.items() if not k.endswith("_ms")})]


def _stress(r: dict[str, Any]) -> list[dict[str, Any]]:
    passes = r["passes"]
    setup = min(passes, key=lambda k: passes[k])
    return [goal(r["goal"], passes[setup], r["runs_per_setup"], "runs passed", "higher",
                 "worst", statistics.median(passes.values()), passes[setup],
                 {"setup": setup, "run_seconds_max": r.get("run_seconds_max")})]


def _elastic(r: dict[str, Any]) -> list[dict[str, Any]]:
    runs, passed = r["runs"], r["passed"]
    worst = r.get("worst_case") or {}
    return [goal(r["goal"], passed, runs, "rounds passed", "higher", "worst", passed, passed,
                 {"round": worst.get("index"), "round_seconds_max": r.get("round_seconds_max")})]


def _grading(r: dict[str, Any]) -> list[dict[str, Any]]:
    runs = r["runs"]
    walls = [run["wall_s"] for run in runs]
    worst = max(runs, key=lambda run: run["wall_s"])
    short = sum(not run["full_marks"] for run in runs)
    return [goal(r["goal"], worst["wall_s"], r["goal_s"], "s", "lower", "worst",
                 statistics.median(walls), worst["wall_s"], {"load_before": worst.get(
                     "load_before")}),
            goal("every solution notebook earns full marks, every repeat", short, 0,
                 "repeats short of full marks", "lower", "worst", short, short, {})]


def _collective_runs(r: dict[str, Any]) -> list[dict[str, Any]]:
    worst = r["worst"]
    config = {"run": worst.get("run"), "nbytes": worst.get("nbytes")}
    return [goal("nccl-tests runs left out of the fit: median error <= 15 %", r["median"],
                 r["median_goal"], "fraction", "lower", "median", r["median"],
                 abs(worst["error"]), config),
            goal("nccl-tests runs left out of the fit: every point within 30 %",
                 abs(worst["error"]), r["every_point_goal"], "fraction", "lower", "worst",
                 r["median"], abs(worst["error"]), config)]


def _gpu(r: dict[str, Any]) -> list[dict[str, Any]]:
    """scripts/record_gpu.py's record: each number within its goal, each outcome as expected,
    every part measured without an error, every step of scripts/gpu_check.sh passed."""
    out = []
    for part, entry in r["parts"].items():
        for label, c in (entry.get("comparisons") or {}).items():
            if c["error"] is None:
                continue
            unit = "fraction" if c["error_kind"] == "relative" else c["unit"]
            out.append(goal(f"GPU {part}: {label} within {c['goal']:g} {unit} of the "
                            f"prediction", c["error"], c["goal"], unit, "lower", "worst",
                            c["error"], c["error"], {"part": part}))
        for label, c in (entry.get("checks") or {}).items():
            if c["goal_met"] is not None:
                miss = 0 if c["goal_met"] else 1
                out.append(goal(f"GPU {part}: {label} is {c['expected']}", miss, 0,
                                "checks failed", "lower", "worst", miss, miss, {"part": part}))
    missing = sorted(p for p, e in r["parts"].items() if e["status"] != "measured")
    out.append(goal("every GPU part measured without an error", len(missing), 0, "parts",
                    "lower", "worst", len(missing), len(missing), {"parts": missing}))
    steps = (r.get("check") or {}).get("steps") or []
    failed = [s["step"] for s in steps if s["status"] not in ("passed", "skipped")]
    if steps:
        out.append(goal("every step of the GPU check passed (or was skipped, with why)",
                        len(failed), 0, "steps", "lower", "worst", len(failed), len(failed),
                        {"steps": failed}))
    return out


GOALS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "collectives": _collectives, "ddp": _ddp, "fuzz_api": _fuzz, "launch": _launch,
    "planner": _planner, "torchrun_stress": _stress, "validation": fidelity_goals,
    "elastic_stress": _elastic, "grading": _grading,
    "single_device": _single_device, "collective_runs": _collective_runs,
    "gpu": _gpu,
}


def stamp(result: dict[str, Any], name: str) -> dict[str, Any]:
    """`result` with its `goals` and the overall `goal_met` (all goals met)."""
    goals = GOALS[name](result)
    result["goals"] = goals
    result["goal_met"] = all(g["goal_met"] for g in goals)
    return result


# the worst case's keys shown in the README
SHOWN = ("world_size", "model", "hidden", "depth", "bucket_cap_mb", "trial", "way", "setup",
         "entry_point", "strategy", "n_devices", "layers", "run", "nbytes", "id", "n_gpus",
         "batch", "table", "stage", "published", "part")


def _load(result: dict[str, Any]) -> str:
    machine = result.get("machine") or {}
    load = machine.get("load_average_1min", machine.get("load_average"))
    if isinstance(load, list):
        load = load[0]
    return f"{load:.1f}" if isinstance(load, int | float) else "-"


def readme_table() -> str:
    """The goals of every results file as a markdown table (README.md quotes it as is)."""
    rows = ["| file | goal | value | median | worst case | met | load (1 min) |",
            "|---|---|---|---|---|---|---|"]
    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text())
        for g in result["goals"]:
            config = ", ".join(f"{k} {v}" for k, v in g["worst"]["config"].items()
                               if k in SHOWN and v is not None) or "-"
            rows.append(f"| {path.name} | {g['goal']} | {g['value']:.4g} {g['unit']} | "
                        f"{g['median']:.4g} | {g['worst']['value']:.4g} ({config}) | "
                        f"{'yes' if g['goal_met'] else '**no**'} | {_load(result)} |")
    return "\n".join(rows)


def dumps(result: dict[str, Any]) -> str:
    """JSON with one line per list item of dicts and per key of `per_entry_point` (the fuzz's
    file stays readable in a diff)."""
    parts = []
    for key, value in result.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            rows = [json.dumps(v, default=str) for v in value]
            body, brackets = ",\n    ".join(rows), "[]"
        elif key == "per_entry_point":
            rows = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
            body, brackets = ",\n    ".join(rows), "{}"
        else:
            parts.append(f"  {json.dumps(key)}: "
                         + json.dumps(value, indent=2, default=str).replace("\n", "\n  "))
            continue
        parts.append(f"  {json.dumps(key)}: {brackets[0]}\n    {body}\n  {brackets[1]}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> None:
    """Re-derive the goals of every results file from its recorded numbers."""
    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text())
        name = result.get("benchmark") or path.stem
        stamp(result, name)
        if name == "fuzz_api":
            path.write_text(dumps(result), encoding="utf-8")
        else:
            path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{path.name}: " + "; ".join(
            f"{g['goal']}: {g['value']:.4g} {g['unit']} (median {g['median']:.4g}, worst "
            f"{g['worst']['value']:.4g}) {'met' if g['goal_met'] else 'NOT met'}"
            for g in result["goals"]))


if __name__ == "__main__":
    main()
