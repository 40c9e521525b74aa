"""Published FSDP / ZeRO-3 training throughput at scale against dpsim's FSDP and HSDP steps.

Data: `data/fsdp_scale.json`, series of published points (torchtitan's performance tables,
fms-fsdp's README, the PyTorch blog on FSDP throughput, the PyTorch/AWS 1T post), each
point with its source and configuration. dpsim simulates each step with the registered
"fsdp" or "hsdp" strategy (the public `Strategy` API and `knobs.apply_knobs`) on the
series' cluster and turns the step time into the published metric: tokens/s per GPU, or
TFLOPS per GPU by the formula the source uses.

One free constant per series: the device's achieved fraction of peak (`Device.efficiency`),
fitted by bisection so that the series' `fit_on` point (its smallest scale or smallest
model) is met exactly. One constant for all series: the width law's KAPPA (`fsdp_width`),
how that fraction rises with the model's width, fitted on the one point the dataset names
in `width_law.train_on`. Every other point is held out; what it tests is how throughput
changes with the number of GPUs (communication exposure) or with the model size
(FLOPs, activation recompute, width, communication).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpsim.sim.fidelity import fsdp_width
from dpsim.sim.hardware import (
    DEVICES,
    EFA_V1,
    EFA_V2,
    INFINIBAND_NDR,
    NVLINK3,
    NVLINK4,
    ROCE_100G,
    ROCE_200G,
    Cluster,
    Link,
)
from dpsim.sim.hardware.presets import CLUSTERS
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.knobs import apply_knobs
from dpsim.sim.strategies.registry import get_strategy
from dpsim.sim.workload import Workload, transformer

DATA = Path(__file__).with_name("data") / "fsdp_scale.json"
GOAL_EVERY = 0.20  # every held-out point within 20 %
INTRA = {"nvlink3": NVLINK3, "nvlink4": NVLINK4}
NICS = (ROCE_100G, ROCE_200G, INFINIBAND_NDR, EFA_V1, EFA_V2)
ITERATIONS = 12  # rescalings of the efficiency before falling back to bisection
BISECTIONS = 32  # efficiency to ~2e-10 of [0.001, 1]


def load(path: Path = DATA) -> dict[str, Any]:
    """The dataset: models, clusters, series of points."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def workload(models: dict[str, Any], name: str) -> Workload:
    """The decoder-only transformer of `models[name]` (dpsim.sim.workload.transformer)."""
    m = models[name]
    return transformer(name, m["n_layers"], m["d_model"], m["n_heads"], m["seq_len"],
                       m["vocab"], m.get("d_ff"), m.get("n_kv_heads"),
                       bool(m.get("gated_mlp", False)))


def _nic(gbps: float, kind: str) -> Link:
    """A shipped NIC of this rate and kind, else one with the latency of its kind's."""
    for link in NICS:
        if link.kind == kind and link.bandwidth_GBps == gbps:
            return link
    like = next(link for link in NICS if link.kind == kind)
    return Link(f"{kind} {gbps * 8:g} Gb/s", gbps, like.latency_us, kind)


def cluster(spec: dict[str, Any], n_gpus: int, efficiency: float,
            nic_scale: float = 1.0) -> Cluster:
    """The series' cluster with `n_gpus` devices at `efficiency` of peak, its NICs'
    bandwidth times `nic_scale` (a sensitivity check of the assumed network)."""
    if "preset" in spec:
        base = CLUSTERS[spec["preset"]]
    else:
        device = DEVICES[spec["device"]]
        device = replace(device, memory_GiB=spec.get("memory_GiB", device.memory_GiB),
                         mem_bw_GBps=spec.get("mem_bw_GBps", device.mem_bw_GBps))
        base = Cluster(spec["device"], device, spec["devices_per_node"], 1,
                       INTRA[spec["intra_node"]], _nic(spec["nic_GBps"], spec["nic_kind"]),
                       nics_per_node=spec["nics_per_node"], nvls=spec["nvls"])
    sized = base.with_devices(n_gpus)
    nic = sized.inter_node
    if nic is not None:
        nic = replace(nic, bandwidth_GBps=nic.bandwidth_GBps * nic_scale)
    return replace(sized, device=replace(sized.device, efficiency=efficiency), inter_node=nic)


def settings(series: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """The point's configuration: the series' settings, overridden by the point's own."""
    keys = ("model", "precision", "optimizer", "activation_checkpointing", "offload")
    merged = {k: series[k] for k in keys if k in series}
    merged.update({k: point[k] for k in keys if k in point})
    merged.setdefault("activation_checkpointing", False)
    merged.setdefault("offload", False)
    return merged


def step(data: dict[str, Any], series: dict[str, Any], point: dict[str, Any],
         efficiency: float) -> StepResult:
    """dpsim's step for one published point at `efficiency`."""
    s = settings(series, point)
    n, batch = point["n_gpus"], point["batch"]
    strategy = get_strategy(point["strategy"])
    amp = s["precision"] == "torch_amp"
    config = strategy.make_config(batch, batch * n, n, s["optimizer"],
                                  "mixed" if amp else s["precision"])
    config = apply_knobs(config, point["strategy"], precision="torch_amp" if amp else "mixed",
                         activation_checkpointing=s["activation_checkpointing"],
                         offload=s["offload"])
    hw = cluster(data["clusters"][series["cluster"]], n, efficiency,
                 data.get("nic_scale", 1.0))
    w = workload(data["models"], s["model"])
    return strategy.step_result(strategy.simulate(w, hw, config))


def metric(data: dict[str, Any], series: dict[str, Any], point: dict[str, Any],
           step_s: float) -> float:
    """The published metric of a step of `step_s` seconds: tokens/s per GPU, or TFLOPS
    per GPU by Narayanan et al. (2021) eq. 3, 96 B s l h^2 (1 + s/6h + V/16lh)."""
    m = data["models"][settings(series, point)["model"]]
    b, s = point["batch"], m["seq_len"]
    if series["metric"] == "tokens_per_s_per_gpu":
        return b * s / step_s
    if series["metric"] == "megatron_tflops_per_gpu":
        layers, h, v = m["n_layers"], m["d_model"], m["vocab"]
        flops = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
        return flops / step_s / 1e12
    raise ValueError(f"metric={series['metric']!r} is not known; allowed: "
                     "'tokens_per_s_per_gpu', 'megatron_tflops_per_gpu'")


def implied_efficiency(data: dict[str, Any], series: dict[str, Any],
                       point: dict[str, Any]) -> float:
    """The efficiency at which dpsim meets the point's published number.

    Throughput is nearly proportional to the efficiency while compute dominates, so the
    efficiency is scaled by published / predicted until they agree to 1e-9; bisection on
    [0.001, 1] when that does not settle (a memory- or communication-bound step)."""
    def ratio(eff: float) -> float:
        predicted = metric(data, series, point, step(data, series, point, eff).step_s)
        return float(point["published"]) / predicted

    eff = 0.5
    for _ in range(ITERATIONS):
        r = ratio(eff)
        if abs(r - 1) < 1e-9:
            return eff
        eff = min(1.0, max(1e-3, eff * r))
    lo, hi = 1e-3, 1.0
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) > 1 else (lo, mid)
    return (lo + hi) / 2


def width_factor(data: dict[str, Any], series: dict[str, Any], point: dict[str, Any],
                 kappa: float) -> float:
    """The point's efficiency over its series' fit-point efficiency by the width law."""
    device = cluster(data["clusters"][series["cluster"]], point["n_gpus"], 1.0).device
    models = data["models"]
    width = models[settings(series, point)["model"]]["d_model"]
    fit_width = models[settings(series, fit_point(series))["model"]]["d_model"]
    return fsdp_width.factor(kappa, device, width, fit_width)


def _width_error(data: dict[str, Any], series: dict[str, Any], point: dict[str, Any],
                 efficiency: float, kappa: float) -> float:
    eff = min(1.0, efficiency * width_factor(data, series, point, kappa))  # at most peak
    return metric(data, series, point, step(data, series, point, eff).step_s) / float(
        point["published"]) - 1


def _bytes_ratio(data: dict[str, Any], effs: dict[str, float], kappa: float) -> float:
    """fsdp_width.bytes_ratio at the training point's model and its series' e_inf."""
    sid, pid = width_train(data)
    series = next(s for s in data["series"] if s["id"] == sid)
    point = next(p for p in series["points"] if p["id"] == pid)
    m = data["models"][settings(series, point)["model"]]
    fit_h = data["models"][settings(series, fit_point(series))["model"]]["d_model"]
    device = cluster(data["clusters"][series["cluster"]], point["n_gpus"], 1.0).device
    e_inf = effs[sid] * (fit_h + fsdp_width.h0(kappa, device)) / fit_h
    block = next(layer for layer in workload(data["models"], settings(series, point)["model"])
                 .layers if layer.kind == "TransformerBlock")
    matmul = block.flops / m["seq_len"] - 4 * m["seq_len"] * m["d_model"]  # less QK^T, AV
    return fsdp_width.bytes_ratio(kappa, min(e_inf, 1.0), matmul, m["d_model"], m["d_ff"])


def width_train(data: dict[str, Any]) -> tuple[str, str]:
    """(series id, point id) of the point the width law's KAPPA is fitted on."""
    train = data["width_law"]["train_on"]
    return train["series"], train["point"]


def fit_kappa(data: dict[str, Any], efficiencies: dict[str, float]) -> float:
    """KAPPA at which dpsim meets the width law's training point (bisection; `efficiencies`:
    each series' fitted efficiency). 0 when the point needs no rise with width."""
    sid, pid = width_train(data)
    series = next(s for s in data["series"] if s["id"] == sid)
    point = next(p for p in series["points"] if p["id"] == pid)
    lo, hi = fsdp_width.KAPPA_RANGE
    if _width_error(data, series, point, efficiencies[sid], lo) >= 0:
        return lo
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2
        too_slow = _width_error(data, series, point, efficiencies[sid], mid) < 0
        lo, hi = (mid, hi) if too_slow else (lo, mid)
    return (lo + hi) / 2


def fit_point(series: dict[str, Any]) -> dict[str, Any]:
    """The series' point its efficiency is fitted on."""
    fitted: dict[str, Any] = next(p for p in series["points"] if p["id"] == series["fit_on"])
    return fitted


def varies(series: dict[str, Any]) -> str:
    """"scale" when the series changes the GPU count, "model size" otherwise."""
    return "scale" if len({p["n_gpus"] for p in series["points"]}) > 1 else "model size"


def _row(data: dict[str, Any], series: dict[str, Any], point: dict[str, Any],
         efficiency: float, kappa: float) -> dict[str, Any]:
    width = width_factor(data, series, point, kappa)
    r = step(data, series, point, min(1.0, efficiency * width))  # at most the peak
    predicted = metric(data, series, point, r.step_s)
    role = ("efficiency fit" if point["id"] == series["fit_on"] else "width-law fit"
            if (series["id"], point["id"]) == width_train(data) else "held out")
    held_out = role == "held out"
    s = settings(series, point)
    return {"series": series["id"], "point": point["id"], "varies": varies(series),
            "model": s["model"], "n_gpus": point["n_gpus"], "strategy": point["strategy"],
            "batch": point["batch"], "activation_checkpointing": s["activation_checkpointing"],
            "metric": series["metric"], "published": point["published"],
            "predicted": round(predicted, 1),
            "error": round(predicted / point["published"] - 1, 4) + 0.0,  # + 0.0: no -0.0
            "held_out": held_out, "role": role, "width_factor": round(width, 4),
            "exposed_comm_share": round(r.exposed_comm_s / r.step_s, 4),
            "comm_to_compute": round(r.comm_s / r.compute_s, 4),
            "implied_efficiency": round(implied_efficiency(data, series, point), 4)
            if point["id"] != series["fit_on"] else round(efficiency, 4),
            "where": point["where"]}


def evaluate(path: Path = DATA, nic_scale: float = 1.0,
             width_train_on: tuple[str, str] | None = None) -> dict[str, Any]:
    """Fit each series on its `fit_on` point, the width law on its training point; every
    other point is held out. `nic_scale` multiplies every NIC's bandwidth (the networks
    are partly assumed); `width_train_on` (series id, point id) fits KAPPA on another point
    than the dataset's (a sensitivity check of that choice)."""
    data = load(path)
    data["nic_scale"] = nic_scale
    if width_train_on is not None:
        data["width_law"]["train_on"] = dict(zip(("series", "point"), width_train_on,
                                                 strict=True))
    rows: list[dict[str, Any]] = []
    effs = {s["id"]: implied_efficiency(data, s, fit_point(s)) for s in data["series"]}
    fitted = {k: round(v, 4) for k, v in effs.items()}
    kappa = fit_kappa(data, effs)
    for series in data["series"]:
        rows += [_row(data, series, p, effs[series["id"]], kappa) for p in series["points"]]
    held = [r for r in rows if r["held_out"]]
    errs = [abs(r["error"]) for r in held]
    by_kind = {k: statistics.median(abs(r["error"]) for r in held if r["varies"] == k)
               for k in sorted({r["varies"] for r in held})}
    sid, pid = width_train(data)
    flat = [abs(_width_error(data, s, p, effs[s["id"]], 0.0)) for s in data["series"]
            for p in s["points"] if any(r["held_out"] and (r["series"], r["point"])
                                        == (s["id"], p["id"]) for r in rows)]
    return {"rows": rows, "fitted_efficiency": fitted,
            "width_law": {"kappa": round(kappa, 3), "train_on": f"{sid} {pid}",
                          "bytes_ratio": round(_bytes_ratio(data, effs, kappa), 1),
                          "note": data["width_law"]["note"],
                          "h0": {k: round(fsdp_width.h0(kappa, cluster(c, 8, 1.0).device))
                                 for k, c in data["clusters"].items()}},
            "fitted_on": {s["id"]: s["fit_on"] for s in data["series"]},
            "median": statistics.median(errs), "worst": max(errs),
            "median_by_kind": by_kind,
            "fit_residual_worst": max(abs(r["error"]) for r in rows if not r["held_out"]),
            "flat": {"median": statistics.median(flat), "worst": max(flat)},
            "n_points": len(rows), "n_held_out": len(held),
            "series": {s["id"]: {"source": s["source"], "config": s["config"],
                                 "note": s.get("modelling_note", "")} for s in data["series"]},
            "clusters": {k: v["source"] for k, v in data["clusters"].items()},
            "models": {k: v["source"] for k, v in data["models"].items()}}
