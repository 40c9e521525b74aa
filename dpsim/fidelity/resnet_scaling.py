"""NVIDIA's ResNet-50 v1.5 multi-GPU tables against dpsim's DDP strategy.

Data: `data/nvidia_resnet50.json`, throughput (img/s) at 1 GPU and at 2-16 GPUs of one
DGX A100, DGX-1 or DGX-2, per-GPU batch fixed, from the PyTorch, MXNet and TensorFlow
READMEs of NVIDIA/DeepLearningExamples (each table with repo, path, commit and column).

Input, not prediction: each table's 1-GPU row. The device's achieved fraction of peak
(`Device.efficiency`) is set by bisection so that dpsim's single-device step equals the
published 1-GPU step (batch / throughput). Every multi-GPU row is then predicted by
`dpsim.strategies.ddp.simulate` on the machine's cluster preset with ResNet-50's gradient
bytes (fp32, or fp16 where the framework keeps 16-bit parameters), buckets of DDP's
defaults, SGD with momentum: step time and scaling efficiency (1-GPU step / n-GPU step).
TF32 runs use the A100's TF32 tensor-core peak for fp32 compute.

Nothing else is fitted for the goal. Beside it, an extension that dpsim does not ship is
tested: each step waits for the slowest of n ranks, adding c x E[max of n standard normals]
x the 1-GPU step; c is fitted on the multi-GPU rows at even positions and reported on the
odd ones (held out).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from dpsim.cluster_presets import CLUSTERS, SOURCES
from dpsim.hardware import DEVICES, V100_32GB, Cluster, Device
from dpsim.strategies import ddp, single
from dpsim.workload import Workload, get_workload

DATA = Path(__file__).with_name("data") / "nvidia_resnet50.json"
TF32_TFLOPS = 156.0  # A100 datasheet, 'TF32 Tensor Core 156 TFLOPS' (312 with sparsity)
TF32_SOURCE = ("NVIDIA A100 Tensor Core GPU datasheet, table 'Specifications': TF32 Tensor "
               "Core 156 TFLOPS dense (312 with sparsity)")
OPTIMIZER = "sgd_momentum"  # all three READMEs: SGD with momentum 0.875
DEVICE_VARIANTS = {"v100-16gb": replace(V100_32GB, name="V100 16GB SXM2", memory_GiB=16.0)}


def load(path: Path = DATA) -> dict[str, Any]:
    """The dataset as stored."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def device_of(table: dict[str, Any]) -> Device:
    """The table's GPU; under TF32 its fp32 peak is the TF32 tensor-core peak."""
    device = DEVICE_VARIANTS.get(table["device"]) or DEVICES[table["device"]]
    return replace(device, fp32_tflops=TF32_TFLOPS) if table["precision"] == "tf32" else device


def compute_dtype(table: dict[str, Any]) -> str:
    """fp16 under AMP (V100 and A100 runs use fp16 tensor cores), else fp32."""
    return "fp16" if table["precision"] == "amp" else "fp32"


def _single_s(workload: Workload, device: Device, batch: int, dtype: str) -> float:
    cfg = single.SingleConfig(batch_size=batch, optimizer=OPTIMIZER, dtype=dtype)
    return single.step_result(single.simulate(workload, device, cfg)).step_s


def fit_efficiency(workload: Workload, device: Device, batch: int, dtype: str,
                   published_s: float) -> float:
    """The efficiency whose single-device step takes `published_s` (bisection)."""
    lo, hi = 1e-4, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if _single_s(workload, replace(device, efficiency=mid), batch, dtype) > published_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def cluster_of(table: dict[str, Any], device: Device, n_gpus: int) -> Cluster:
    """The table's machine with `device`, resized to `n_gpus` of one node."""
    return replace(CLUSTERS[table["cluster"]], device=device).with_devices(n_gpus)


def ddp_step_s(workload: Workload, table: dict[str, Any], device: Device,
               n_gpus: int) -> float:
    """dpsim's DDP step on `n_gpus` (public API: ddp.simulate with the table's gradients)."""
    cfg = ddp.DDPConfig(batch_size=table["batch_per_gpu"], optimizer=OPTIMIZER,
                        dtype=compute_dtype(table))
    grads = ddp.grad_tensors(workload, table["gradient_dtype"])
    trace = ddp.simulate(workload, cluster_of(table, device, n_gpus), cfg, tensors=grads)
    return ddp.step_result(trace).step_s


@lru_cache(maxsize=64)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1), by quadrature."""
    if n <= 1:
        return 0.0
    step, total = 0.005, 0.0
    for i in range(-2000, 2001):
        x = i * step
        pdf = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * pdf * cdf ** (n - 1) * step
    return total


def _row(workload: Workload, table: dict[str, Any], device: Device, base_s: float,
         point: dict[str, Any]) -> dict[str, Any]:
    n, batch = point["n_gpus"], table["batch_per_gpu"]
    published = batch * n / point["img_per_s"]
    predicted = ddp_step_s(workload, table, device, n)
    pub_eff, model_eff = base_s / published, base_s / predicted
    return {"table": table["id"], "framework": table["framework"], "n_gpus": n,
            "precision": table["precision"], "batch_per_gpu": batch,
            "published_s": round(published, 5), "predicted_s": round(predicted, 5),
            "error": round(predicted / published - 1, 4),
            "published_efficiency": round(pub_eff, 4),
            "predicted_efficiency": round(model_eff, 4),
            "efficiency_error": round(model_eff / pub_eff - 1, 4),
            "base_s": base_s, "where": table["source"]["where"]}


def straggler_fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Fit c on the even positions, report every row with the term; odd rows held out."""
    def term(r: dict[str, Any]) -> float:
        return expected_max_normal(r["n_gpus"]) * r["base_s"]

    train = rows[0::2]
    num = sum(term(r) / r["published_s"] * (1 - r["predicted_s"] / r["published_s"])
              for r in train)
    den = sum((term(r) / r["published_s"]) ** 2 for r in train)
    c = num / den if den > 0 else 0.0
    out = []
    for i, r in enumerate(rows):
        step = r["predicted_s"] + c * term(r)
        err = step / r["published_s"] - 1
        eff_err = (r["base_s"] / step) / r["published_efficiency"] - 1
        out.append({"table": r["table"], "n_gpus": r["n_gpus"], "predicted_s": round(step, 5),
                    "error": round(err, 4), "efficiency_error": round(eff_err, 4),
                    "held_out": i % 2 == 1})
    held = [max(abs(r["error"]), abs(r["efficiency_error"])) for r in out if r["held_out"]]
    fit = [max(abs(r["error"]), abs(r["efficiency_error"])) for r in out if not r["held_out"]]
    return {"c": round(c, 4), "rows": out, "held_out_worst": round(max(held), 4),
            "held_out_median": round(sorted(held)[len(held) // 2], 4),
            "fit_residual_worst": round(max(fit), 4),
            "fitted_on": "multi-GPU rows at even positions (0, 2, 4, ...) in the order of "
                         "data/nvidia_resnet50.json; odd positions held out"}


def evaluate(path: Path = DATA) -> dict[str, Any]:
    """Every multi-GPU row predicted from its table's 1-GPU row; median and worst of
    max(|step error|, |scaling error|) per row; the straggler extension beside it."""
    data = load(path)
    workload = get_workload("resnet50")
    rows, fitted = [], {}
    for table in data["tables"]:
        base = next(p for p in table["rows"] if p["n_gpus"] == 1)
        base_s = table["batch_per_gpu"] / base["img_per_s"]
        device = device_of(table)
        eff = fit_efficiency(workload, device, table["batch_per_gpu"], compute_dtype(table),
                             base_s)
        fitted[table["id"]] = round(eff, 4)
        device = replace(device, efficiency=eff)
        rows += [_row(workload, table, device, base_s, p) for p in table["rows"]
                 if p["n_gpus"] > 1]
    worst_of = [max(abs(r["error"]), abs(r["efficiency_error"])) for r in rows]
    ext = straggler_fit(rows)
    for r in rows:
        r["base_s"] = round(r["base_s"], 5)
    worst = max(range(len(rows)), key=lambda i: worst_of[i])
    by_precision = {p: round(max(w for w, r in zip(worst_of, rows, strict=True)
                                 if r["precision"] == p), 4)
                    for p in sorted({r["precision"] for r in rows})}
    return {"rows": rows, "efficiency_by_table": fitted, "n_points": len(rows),
            "median": sorted(worst_of)[len(worst_of) // 2], "worst": worst_of[worst],
            "worst_case": rows[worst], "straggler_extension": ext,
            "worst_by_precision": by_precision,
            "tables": {t["id"]: {"source": t["source"], "batch_source": t["batch_source"],
                                 "all_reduce": t["all_reduce"], "cluster": t["cluster"],
                                 "device": t["device"]} for t in data["tables"]},
            "note": data["note"]}


WHY_MISSED = (
    "dpsim's DDP step hides the all-reduce (under 2 ms for ResNet-50's 51-102 MB of "
    "gradients over NVLink) behind a 100-500 ms step, so it predicts 99.6-99.9 % scaling "
    "everywhere. The published losses are up to 6 % with FP32/TF32 and up to 17 % with AMP, "
    "largest for PyTorch on DGX A100 and DGX-1 and TensorFlow on 16 GPUs of a DGX-2. The "
    "tables do not say where that time goes; what the AMP rows share is a 2.6-3.6x shorter "
    "step, so any cost outside GPU compute and the all-reduce (input pipeline, host, the "
    "slowest rank each step) weighs about three times more. dpsim models none of these.")


def family(goal: float) -> dict[str, Any]:
    """The results entry of this family (`goal`: the largest error allowed at any point)."""
    ev = evaluate()
    return {"goal": f"DDP step time and scaling efficiency within {goal:.0%} at every "
                    "multi-GPU point, predicted from each table's 1-GPU row",
            "value": {"median": ev["median"], "worst": ev["worst"]},
            "goal_met": ev["worst"] <= goal, "worst_case": ev["worst_case"],
            "n_points": ev["n_points"],
            "fitted": {"device_efficiency_by_table": ev["efficiency_by_table"],
                       "on": "each table's 1-GPU row (an input, not a prediction); every "
                             "multi-GPU row is held out"},
            "worst_by_precision": ev["worst_by_precision"],
            "straggler_extension": ev["straggler_extension"], "why_missed": WHY_MISSED,
            "tf32_peak": TF32_SOURCE, "tables": ev["tables"], "note": ev["note"],
            "clusters": {t["cluster"]: SOURCES[t["cluster"]] for t in ev["tables"].values()},
            "rows": ev["rows"]}


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def section(fam: dict[str, Any]) -> list[str]:
    """docs/validation.md's section for this family: every point, the extension, sources."""
    ext = fam["straggler_extension"]
    out = ["## NVIDIA ResNet-50 multi-GPU scaling (DDP strategy)", "",
           f"Goal: {fam['goal']}. Held-out median {fam['value']['median']:.1%}, worst "
           f"{fam['value']['worst']:.1%} (`{fam['worst_case']['table']}`, "
           f"{fam['worst_case']['n_gpus']} GPUs); goal met: {fam['goal_met']}. Error per "
           "point: the larger of |step error| and |scaling error|. Input (not predicted): "
           "each table's 1-GPU row, which sets the GPU's achieved fraction of peak "
           f"`{json.dumps(fam['fitted']['device_efficiency_by_table'])}`. Worst by precision: "
           + ", ".join(f"{k} {v:.1%}" for k, v in fam["worst_by_precision"].items()) + ".", "",
           "Workload: `get_workload(\"resnet50\")` (25.6 M parameters in six stages); DDP's "
           "buckets (1 MiB first, 25 MiB after) are built over one gradient per stage, not "
           "torchvision's 161 tensors; gradients are fp16 only where the framework keeps "
           "16-bit parameters (MXNet float16).", "",
           WHY_MISSED, "",
           "| table | GPUs | batch/GPU | published s | dpsim s | error | published scaling | "
           "dpsim scaling | error |", "|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['table']} | {r['n_gpus']} | {r['batch_per_gpu']} | {r['published_s']} | "
            f"{r['predicted_s']} | {_pct(r['error'])} | {r['published_efficiency']} | "
            f"{r['predicted_efficiency']} | {_pct(r['efficiency_error'])} |"
            for r in fam["rows"]]
    out += ["", "Not shipped, tested here: each step waits for the slowest of n ranks, "
            "+ c x E[max of n standard normals] x the 1-GPU step. Fitted on "
            f"{ext['fitted_on']}: c = {ext['c']}. Held out: median {ext['held_out_median']:.1%}, "
            f"worst {ext['held_out_worst']:.1%} (fit residual, worst "
            f"{ext['fit_residual_worst']:.1%}).", "",
            "| table | GPUs | with the term, s | step error | scaling error | held out |",
            "|---|---|---|---|---|---|"]
    out += [f"| {r['table']} | {r['n_gpus']} | {r['predicted_s']} | {_pct(r['error'])} | "
            f"{_pct(r['efficiency_error'])} | {r['held_out']} |" for r in ext["rows"]]
    out += ["", "Sources (throughput in img/s; published step = batch x GPUs / throughput, "
            "published scaling = n-GPU / (n x 1-GPU throughput)):", ""]
    for name, t in fam["tables"].items():
        s, b = t["source"], t["batch_source"]
        out.append(f"- `{name}`: {s['repo']}, `{s['path']}` at commit `{s['commit']}`, "
                   f"{s['where']}. Batch per GPU: `{b['path']}`, {b['where']}. Cluster "
                   f"preset `{t['cluster']}`, device `{t['device']}`. All-reduce: "
                   f"{t['all_reduce']}.")
    out += [f"- cluster `{name}`: {text}." for name, text in fam["clusters"].items()]
    out += [f"- TF32 peak: {fam['tf32_peak']}.", f"- {fam['note']}", ""]
    return out
