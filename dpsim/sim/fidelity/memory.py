"""DeepSpeed's memory-estimator outputs against `dpsim.sim.cost.memory.zero_bytes_per_device`.

DeepSpeed counts, per parameter: ZeRO-2, 4 bytes replicated (16-bit parameters and
gradients) + 16 sharded (fp32 parameters, gradients, two Adam moments); ZeRO-3, 18 sharded
(16-bit parameters, fp32 gradients, fp32 parameters and moments) + 4 x the largest layer,
gathered. dpsim's ZeRO arithmetic is given those bytes; offloaded states are 0 bytes on the
GPU. Nothing is fitted: every point is a prediction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpsim.sim.cost.memory import zero_bytes_per_device
from dpsim.sim.limits import GiB

DATA = Path(__file__).with_name("data") / "deepspeed_memory.json"

# (param_bytes, grad_bytes, optimizer_bytes) on the GPU, per stage and offload
BYTES = {
    (2, "none"): (4, 4, 12),  # 4 replicated = param_bytes; 16 sharded = grad + optimizer
    (2, "optimizer"): (2, 0, 0),
    (3, "none"): (2, 4, 12),
    (3, "optimizer"): (2, 0, 0),
    (3, "all"): (0, 0, 0),
}


def evaluate(path: Path = DATA) -> dict[str, Any]:
    """Every published point with dpsim's number and the relative error."""
    data = json.loads(path.read_text())
    n, layer, gpus = data["total_params"], data["largest_layer_params"], data["n_gpus"]
    rows = []
    for p in data["points"]:
        pb, gb, ob = BYTES[(p["stage"], p["offload"])]
        states = zero_bytes_per_device(n, gpus, p["stage"], param_bytes=pb, grad_bytes=gb,
                                       optimizer_bytes=ob).model_states
        gathered = 4 * layer if p["stage"] == 3 else 0
        predicted = (states + gathered) / GiB
        rows.append({"id": p["id"], "published_GB": p["per_gpu_GB"],
                     "predicted_GB": round(predicted, 4),
                     "error": round(predicted / p["per_gpu_GB"] - 1, 4),
                     "where": p["where"]})
    worst = max(abs(r["error"]) for r in rows)
    return {"rows": rows, "source": data["source"], "worst": worst,
            "median": sorted(abs(r["error"]) for r in rows)[len(rows) // 2]}
