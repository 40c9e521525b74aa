"""The wait for the slowest rank's input batch, beside dpsim's DDP step.

Why: in NVIDIA's ResNet-50 tables the large multi-GPU AMP losses (6-17 %) are in runs whose
JPEGs are decoded on the host CPUs (PyTorch's DataLoader, TensorFlow's tf.data; sources in
`data/nvidia_resnet50.json`, key `input_pipelines`); MXNet, whose DALI
decodes on the GPU, loses 2-5 % at 8 GPUs with AMP at a higher per-GPU rate, so the
GPUs, NVLink and the all-reduce sustain that rate. No README says where the time goes.

Model (an assumption, said so): each step every rank waits for its next batch from its
input pipeline; the time that takes varies from step to step, independently across ranks,
as a normal with standard deviation s x (images per batch). s (seconds per image) depends
only on where JPEGs are decoded ("host" or "gpu"), not on the GPU's speed. A synchronous
step (DDP's all-reduce, Horovod's) then waits E[max of n standard normals] x s x batch
longer than one rank alone. Relative to the step (batch / the GPU's images/s) that is
s x images/s x E[max]: it grows with the GPU's rate, which AMP raises 2.6-3.6x.
s is fitted per decode site on designated training rows only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

SITES = ("host", "gpu")
Term = Callable[[dict[str, Any]], float]


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


def wait_term(row: dict[str, Any]) -> float:
    """The shipped model's wait per unit s (s per image): E[max of n] x images per batch."""
    return expected_max_normal(row["n_gpus"]) * row["batch_per_gpu"]


# Every form that was tried; each row needs n_gpus, batch_per_gpu, base_s and `site`.
VARIANTS: dict[str, tuple[Term, bool]] = {
    "s x batch, per decode site (shipped)": (wait_term, True),
    "s x batch, one s": (wait_term, False),
    "c x 1-GPU step, one c (the earlier extension)":
        (lambda r: expected_max_normal(r["n_gpus"]) * r["base_s"], False),
    "c x 1-GPU step, per decode site":
        (lambda r: expected_max_normal(r["n_gpus"]) * r["base_s"], True),
    "a fixed time, per decode site": (lambda r: expected_max_normal(r["n_gpus"]), True),
}


def fit(rows: list[dict[str, Any]], train: Iterable[int], term: Term = wait_term,
        per_site: bool = True) -> dict[str, float]:
    """Least squares on the training rows' relative step residual: s per decode site."""
    chosen = set(train)
    out = {}
    for site in SITES:
        tr = [r for i, r in enumerate(rows)
              if i in chosen and (not per_site or r["site"] == site)]
        x = [term(r) / r["published_s"] for r in tr]
        y = [1 - r["predicted_s"] / r["published_s"] for r in tr]
        den = sum(v * v for v in x)
        out[site] = sum(a * b for a, b in zip(x, y, strict=True)) / den if den > 0 else 0.0
    return out


def worst_error(step_s: float, row: dict[str, Any]) -> tuple[float, float, float]:
    """(step error, scaling error, the larger in size) of a predicted step for a row."""
    err = step_s / row["published_s"] - 1
    eff_err = (row["base_s"] / step_s) / row["published_efficiency"] - 1
    return err, eff_err, max(abs(err), abs(eff_err))


def apply(rows: list[dict[str, Any]], train: Iterable[int], term: Term = wait_term,
          per_site: bool = True) -> dict[str, Any]:
    """Fit on `train`, then every row with the wait; held-out and residual summaries."""
    chosen = set(train)
    s = fit(rows, chosen, term, per_site)
    out = []
    for i, r in enumerate(rows):
        wait = s[r["site"]] * term(r)
        err, eff_err, worst = worst_error(r["predicted_s"] + wait, r)
        out.append({"table": r["table"], "n_gpus": r["n_gpus"], "precision": r["precision"],
                    "site": r["site"], "wait_s": round(wait, 5),
                    "predicted_s": round(r["predicted_s"] + wait, 5), "error": round(err, 4),
                    "efficiency_error": round(eff_err, 4), "worst": round(worst, 4),
                    "held_out": i not in chosen})
    held = sorted(r["worst"] for r in out if r["held_out"])
    fit_res = [r["worst"] for r in out if not r["held_out"]]
    by_precision = {p: max(r["worst"] for r in out if r["held_out"] and r["precision"] == p)
                    for p in sorted({r["precision"] for r in out if r["held_out"]})}
    worst_row = max((r for r in out if r["held_out"]), key=lambda r: r["worst"])
    return {"s_per_image": {k: round(v, 9) for k, v in s.items()}, "rows": out,
            "held_out_median": held[len(held) // 2], "held_out_worst": held[-1],
            "held_out_worst_case": {k: worst_row[k] for k in ("table", "n_gpus")},
            "held_out_worst_by_precision": by_precision,
            "fit_residual_worst": max(fit_res) if fit_res else 0.0}


def leave_one_table_out(rows: list[dict[str, Any]], term: Term = wait_term,
                        per_site: bool = True) -> dict[str, Any]:
    """Each table predicted with s fitted on every other table: median and worst."""
    worst = {}
    for table in dict.fromkeys(r["table"] for r in rows):
        train = [i for i, r in enumerate(rows) if r["table"] != table]
        worst[table] = apply(rows, train, term, per_site)["held_out_worst"]
    values = sorted(worst.values())
    top = max(worst, key=lambda t: worst[t])
    return {"median": values[len(values) // 2], "worst": worst[top], "worst_table": top}


def variants(rows: list[dict[str, Any]], train: list[int]) -> list[dict[str, Any]]:
    """Every form tried: held-out worst on the designated split, its mirror, and LOTO."""
    mirror = [i for i in range(len(rows)) if i not in set(train)]
    out = []
    for name, (term, per_site) in VARIANTS.items():
        out.append({"form": name,
                    "held_out_worst": apply(rows, train, term, per_site)["held_out_worst"],
                    "mirror_held_out_worst": apply(rows, mirror, term,
                                                   per_site)["held_out_worst"],
                    "leave_one_table_out_worst":
                        leave_one_table_out(rows, term, per_site)["worst"]})
    return out
