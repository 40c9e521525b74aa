"""The PyTorch DDP benchmark README (ResNet-50, V100, 1-16 GPUs) against dpsim's DDP model.

One free constant: the V100's achieved fraction of peak (`Device.efficiency`), fitted by
bisection so that dpsim's single-device step equals the published one-GPU, no-DDP time.
Every DDP point (1 to 16 GPUs) is then a held-out prediction, step time and scaling
efficiency (no-DDP time / DDP time). The machines are DGX-1s: NVLink 2 between GPUs and
four 100 Gb/s InfiniBand NICs per machine.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpsim.sim.hardware import INFINIBAND_EDR, NVLINK2, V100_32GB, Cluster, Device
from dpsim.sim.strategies import ddp, single
from dpsim.sim.workload import get_workload

DATA = Path(__file__).with_name("data") / "ddp_benchmark.json"


def _single_s(device: Device, batch: int) -> float:
    w = get_workload("resnet50")
    cfg = single.SingleConfig(batch_size=batch, optimizer="sgd")
    return single.step_result(single.simulate(w, device, cfg)).step_s


def fit_efficiency(published_s: float, batch: int) -> float:
    """The efficiency whose single-device step takes `published_s` (bisection)."""
    lo, hi = 1e-3, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _single_s(replace(V100_32GB, efficiency=mid), batch) > published_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def evaluate(path: Path = DATA) -> dict[str, Any]:
    """Fit on the no-DDP point; every DDP point held out (time and scaling efficiency)."""
    data = json.loads(path.read_text())
    batch = data["batch_size"]
    base = next(p for p in data["points"] if not p["ddp"])
    eff = fit_efficiency(base["sec_per_iter"], batch)
    device = replace(V100_32GB, efficiency=eff)
    rows = []
    for p in data["points"]:
        if not p["ddp"]:
            continue
        n = p["n_gpus"]
        nodes = max(1, n // 8)
        cluster = Cluster("DGX-1", device, min(n, 8), nodes, NVLINK2,
                          INFINIBAND_EDR if nodes > 1 else None, nics_per_node=4)
        cfg = ddp.DDPConfig(batch_size=batch, optimizer="sgd")
        t = ddp.step_result(ddp.simulate(get_workload("resnet50"), cluster, cfg)).step_s
        published_eff = base["sec_per_iter"] / p["sec_per_iter"]
        model_eff = base["sec_per_iter"] / t
        rows.append({"n_gpus": n, "published_s": p["sec_per_iter"], "predicted_s": round(t, 5),
                     "error": round(t / p["sec_per_iter"] - 1, 4),
                     "published_efficiency": round(published_eff, 4),
                     "predicted_efficiency": round(model_eff, 4),
                     "efficiency_error": round(model_eff / published_eff - 1, 4),
                     "held_out": True, "where": p["where"]})
    worst = max(max(abs(r["error"]), abs(r["efficiency_error"])) for r in rows)
    errs = sorted(abs(r["error"]) for r in rows)
    return {"rows": rows, "fitted_efficiency": round(eff, 4), "source": data["source"],
            "config": data["config"], "median": errs[len(errs) // 2], "worst": worst}
