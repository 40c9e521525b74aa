"""Goals in the shape every results file uses (validation.json and benchmarks/results),
and the validation's goals.

One dict per goal (`goal`): {goal, value, unit, target, better, decided_by, goal_met, median,
worst: {value, config}}; `value` is the number the goal is judged on (the median for a
goal about the median, the worst point for a goal about every point).
"""

from __future__ import annotations

from typing import Any

COLLECTIVES_MEDIAN, COLLECTIVES_EVERY = 0.15, 0.30  # held-out relative error
MEMORY_EVERY = 0.01
DDP_EVERY = 0.15
RESNET_EVERY = 0.15  # NVIDIA ResNet-50 tables: step time and scaling, every point
ZERO_PAPER_EVERY = 0.01  # ZeRO paper Tables 1-2: every cell, beyond the printed rounding
FSDP_SCALE_EVERY = 0.20  # FSDP/ZeRO-3 throughput, every held-out point


def goal(text: str, value: float, target: float, unit: str, better: str, decided_by: str,
         median: float, worst: float, worst_config: Any) -> dict[str, Any]:
    """One goal; `better` is "lower" or "higher", `decided_by` "median" or "worst".

    The one definition of a goal's shape: validation.json and every benchmarks/results file.
    """
    met = value <= target if better == "lower" else value >= target
    return {"goal": text, "value": value, "unit": unit, "target": target, "better": better,
            "decided_by": decided_by, "goal_met": bool(met), "median": median,
            "worst": {"value": worst, "config": worst_config}}


def _goal(text: str, value: float, target: float, decided_by: str, median: float,
          worst: float, config: dict[str, Any]) -> dict[str, Any]:
    """A validation goal: a relative error, lower is better."""
    return goal(text, value, target, "fraction", "lower", decided_by, median, worst, config)


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals of `results` (what `dpsim.reports.validation.run` returns, or its JSON file)."""
    fam = results["families"]
    coll = fam["nccl_tests_time"]
    mem = fam["deepspeed_memory_estimator"]
    ddp = fam["pytorch_ddp_benchmark"]
    where = {k: coll["worst_case"][k] for k in ("run", "nbytes", "algorithm")}
    return [
        _goal("nccl-tests collective time: held-out median error <= 15 %",
              coll["value"]["median"], COLLECTIVES_MEDIAN, "median", coll["value"]["median"],
              coll["value"]["worst"], where),
        _goal("nccl-tests collective time: every held-out point within 30 %",
              coll["value"]["worst"], COLLECTIVES_EVERY, "worst", coll["value"]["median"],
              coll["value"]["worst"], where),
        _goal("DeepSpeed memory estimator: every point within 1 %", mem["value"]["worst"],
              MEMORY_EVERY, "worst", mem["value"]["median"], mem["value"]["worst"],
              {"id": mem["worst_case"]["id"]}),
        _goal("PyTorch DDP benchmark: step time and scaling within 15 % at every point",
              ddp["value"]["worst"], DDP_EVERY, "worst", ddp["value"]["median"],
              ddp["value"]["worst"], {"n_gpus": ddp["worst_case"]["n_gpus"]}),
        *_resnet_goals(fam), *_zero_paper_goals(fam), *_fsdp_scale(fam),
    ]


def _resnet_goals(fam: dict[str, Any]) -> list[dict[str, Any]]:
    """NVIDIA's ResNet-50 multi-GPU tables (absent from results written before them)."""
    if "nvidia_resnet50_scaling" not in fam:
        return []
    r = fam["nvidia_resnet50_scaling"]
    return [_goal("NVIDIA ResNet-50 tables: DDP step + input-batch wait, step time and "
                  "scaling within 15 % at every held-out point", r["value"]["worst"],
                  RESNET_EVERY, "worst", r["value"]["median"], r["value"]["worst"],
                  {k: r["worst_case"][k] for k in ("table", "n_gpus")})]


def _zero_paper_goals(fam: dict[str, Any]) -> list[dict[str, Any]]:
    """The ZeRO paper's Tables 1 and 2 (absent from results written before them)."""
    if "zero_paper_tables" not in fam:
        return []
    z = fam["zero_paper_tables"]
    w = z["worst_case"]
    return [_goal("ZeRO paper Tables 1-2: every cell within 1 % (beyond printed rounding)",
                  z["value"]["worst"], ZERO_PAPER_EVERY, "worst", z["value"]["median"],
                  z["value"]["worst"], {"table": w["table"], "stage": w["stage"],
                                        "published": w["published"]})]


def _fsdp_scale(fam: dict[str, Any]) -> list[dict[str, Any]]:
    """The FSDP/ZeRO-3 throughput goal, when the results hold that family."""
    fs = fam.get("fsdp_zero3_throughput_at_scale")
    if fs is None:
        return []
    where = {k: fs["worst_case"][k] for k in ("series", "point", "model", "n_gpus")}
    return [_goal("FSDP/ZeRO-3 throughput at scale: every held-out point within 20 %",
                  fs["value"]["worst"], FSDP_SCALE_EVERY, "worst", fs["value"]["median"],
                  fs["value"]["worst"], where)]
