"""NVIDIA's ResNet-50 v1.5 multi-GPU tables against dpsim's DDP strategy.

Data: `data/nvidia_resnet50.json`, throughput (img/s) at 1 GPU and at 2-16 GPUs of one
DGX A100, DGX-1 or DGX-2, per-GPU batch fixed, from the PyTorch, MXNet and TensorFlow
READMEs of NVIDIA/DeepLearningExamples (each table with repo, path, commit and column).

Input, not prediction: each table's 1-GPU row. The device's achieved fraction of peak
(`Device.efficiency`) is set by bisection so that dpsim's single-device step equals the
published 1-GPU step (batch / throughput). Every multi-GPU row is then predicted by
`dpsim.sim.strategies.ddp.simulate` on the machine's cluster preset with ResNet-50's gradient
bytes (fp32, or fp16 where the framework keeps 16-bit parameters), buckets of DDP's
defaults, SGD with momentum: step time and scaling efficiency (1-GPU step / n-GPU step).
TF32 runs use the A100's TF32 tensor-core peak for fp32 compute.

Beside the DDP step, the wait for the slowest rank's input batch (`input_pipeline.py`):
s x batch x E[max of n standard normals], s (seconds per image) fitted per decode site
(host CPUs or GPU, sourced per framework) on the multi-GPU rows at even positions; the odd
rows are held out, and every table is also predicted with s fitted on the others.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpsim.sim.fidelity import input_pipeline
from dpsim.sim.hardware import DEVICES, V100_32GB, Cluster, Device
from dpsim.sim.hardware.presets import CLUSTERS, SOURCES
from dpsim.sim.strategies import ddp, single
from dpsim.sim.workload import Workload, get_workload

DATA = Path(__file__).with_name("data") / "nvidia_resnet50.json"
TF32_TFLOPS = 156.0  # A100 datasheet, 'TF32 Tensor Core 156 TFLOPS' (312 with sparsity)
CPU_SOURCE = ("DGX A100: 2x AMD Epyc Rome 7742 @ 2.25GHz, 'a total core count of 128' "
              "(hardwaretimes.com, https://www.hardwaretimes.com/nvidias-ampere-based-dgx-a100-"
              "servers-leverage-amd-epyc-rome-cpus-instead-of-intel-xeon/)")
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
    """dpsim's DDP step on `n_gpus` (`strategies.ddp.simulate`, what `dpsim.sim.simulate`
    runs for a DDPConfig, with the table's gradients)."""
    cfg = ddp.DDPConfig(batch_size=table["batch_per_gpu"], optimizer=OPTIMIZER,
                        dtype=compute_dtype(table))
    grads = ddp.grad_tensors(workload, table["gradient_dtype"])
    trace = ddp.simulate(workload, cluster_of(table, device, n_gpus), cfg, tensors=grads)
    return ddp.step_result(trace).step_s


def _row(workload: Workload, table: dict[str, Any], device: Device, base_s: float,
         point: dict[str, Any]) -> dict[str, Any]:
    n, batch = point["n_gpus"], table["batch_per_gpu"]
    published = batch * n / point["img_per_s"]
    predicted = ddp_step_s(workload, table, device, n)
    pub_eff, model_eff = base_s / published, base_s / predicted
    return {"table": table["id"], "framework": table["framework"], "n_gpus": n,
            "site": table["site"],
            "precision": table["precision"], "batch_per_gpu": batch,
            "published_s": round(published, 5), "predicted_s": round(predicted, 5),
            "error": round(predicted / published - 1, 4),
            "published_efficiency": round(pub_eff, 4),
            "predicted_efficiency": round(model_eff, 4),
            "efficiency_error": round(model_eff / pub_eff - 1, 4),
            "base_s": base_s, "where": table["source"]["where"]}


def _summary(rows: list[dict[str, Any]], key: str = "worst") -> dict[str, Any]:
    """Median, worst, worst case and worst by precision of one error column."""
    values = sorted(r[key] for r in rows)
    top = max(rows, key=lambda r: r[key])
    return {"median": values[len(values) // 2], "worst": top[key],
            "worst_case": {k: top[k] for k in ("table", "n_gpus")},
            "worst_by_precision": {p: max(r[key] for r in rows if r["precision"] == p)
                                   for p in sorted({r["precision"] for r in rows})}}


def evaluate(path: Path = DATA) -> dict[str, Any]:
    """Every multi-GPU row predicted from its table's 1-GPU row by the DDP strategy, then
    with the input-batch wait (s fitted on the rows at even positions, odd held out)."""
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
        site = data["input_pipelines"][table["framework"]]["decode"]
        rows += [_row(workload, {**table, "site": site}, device, base_s, p)
                 for p in table["rows"] if p["n_gpus"] > 1]
    for r in rows:
        r["worst"] = round(max(abs(r["error"]), abs(r["efficiency_error"])), 4)
    train = list(range(0, len(rows), 2))
    shipped = input_pipeline.apply(rows, train)
    mirror = input_pipeline.apply(rows, list(range(1, len(rows), 2)))
    for r in rows:
        r["base_s"] = round(r["base_s"], 5)
    return {"rows": rows, "efficiency_by_table": fitted, "n_points": len(rows),
            "ddp_alone": _summary(rows), "ddp_alone_held_out": _summary(rows[1::2]),
            "with_wait": shipped,
            "fitted_on": "the multi-GPU rows at even positions (0, 2, 4, ...) in the order of "
                         "data/nvidia_resnet50.json; odd positions held out",
            "mirror": {k: mirror[k] for k in ("s_per_image", "held_out_median",
                                              "held_out_worst", "held_out_worst_case")},
            "leave_one_table_out": input_pipeline.leave_one_table_out(rows),
            "variants": input_pipeline.variants(rows, train),
            "input_pipelines": data["input_pipelines"],
            "tables": {t["id"]: {"source": t["source"], "batch_source": t["batch_source"],
                                 "all_reduce": t["all_reduce"], "cluster": t["cluster"],
                                 "device": t["device"]} for t in data["tables"]},
            "note": data["note"]}


WHY = (
    "dpsim's DDP step hides the all-reduce (under 2 ms for ResNet-50's 51-102 MB of "
    "gradients over NVLink) behind a 100-500 ms step, so alone it predicts 99.6-99.9 % "
    "scaling everywhere. The published losses reach 17 % only where JPEGs are decoded on "
    "the host CPUs (PyTorch's DataLoader, TensorFlow's tf.data) and with AMP; MXNet, whose "
    "DALI decodes on the GPU, loses 2-5 % at 8 GPUs with AMP at a higher rate per GPU "
    "(3410.52 img/s on an A100 against PyTorch's 2470), so the GPUs, NVLink and the "
    "all-reduce are not what limits. In absolute time TensorFlow loses about the same per "
    "step at 8 GPUs with FP32/TF32 and AMP (9.5-13.1 ms beyond dpsim's DDP step). The model "
    "adds that wait: the slowest of n ranks' input batches, s x batch x E[max of n standard "
    "normals], s (seconds per image) per decode site (host, gpu) fitted on training rows. "
    "Relative to the step (batch / the GPU's images/s) the wait is s x images/s x E[max]: "
    "it grows with the GPU's rate, which AMP raises 2.6-3.6x in these tables. A core-count "
    "ceiling does not explain the losses: a DGX A100 has 128 CPU cores, so 8 ranks x 16 "
    "DataLoader workers get one core each, as many workers per rank as the 1-GPU run, yet "
    "PyTorch's AMP run loses 15.9 % there. "
    "The READMEs publish no breakdown of "
    "the step, so the cause is inferred from which runs lose, not measured.")


def family(goal: float) -> dict[str, Any]:
    """The results entry of this family (`goal`: the largest error allowed at any point)."""
    ev = evaluate()
    w = ev["with_wait"]
    met = w["held_out_worst"] <= goal and w["fit_residual_worst"] <= goal
    return {"goal": f"DDP step time and scaling efficiency within {goal:.0%} at every "
                    "multi-GPU point, predicted from each table's 1-GPU row",
            "value": {"median": w["held_out_median"], "worst": w["held_out_worst"]},
            "goal_met": met, "worst_case": w["held_out_worst_case"],
            "n_points": ev["n_points"], "n_held_out": sum(r["held_out"] for r in w["rows"]),
            "fitted": {"device_efficiency_by_table": ev["efficiency_by_table"],
                       "on": "each table's 1-GPU row (an input, not a prediction)",
                       "s_per_image": w["s_per_image"], "s_fitted_on": ev["fitted_on"]},
            "fit_residual_worst": w["fit_residual_worst"],
            "worst_by_precision": w["held_out_worst_by_precision"],
            "ddp_alone": ev["ddp_alone"], "ddp_alone_held_out": ev["ddp_alone_held_out"],
            "mirror_split": ev["mirror"],
            "leave_one_table_out": ev["leave_one_table_out"], "variants": ev["variants"],
            "why": WHY, "cpu_source": CPU_SOURCE, "input_pipelines": ev["input_pipelines"],
            "tf32_peak": TF32_SOURCE,
            "tables": ev["tables"], "note": ev["note"],
            "clusters": {t["cluster"]: SOURCES[t["cluster"]] for t in ev["tables"].values()},
            "rows": ev["rows"], "rows_with_wait": w["rows"]}
