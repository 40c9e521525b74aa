"""docs/validation.md's section for NVIDIA's ResNet-50 tables (`resnet_scaling.family`)."""

from __future__ import annotations

import json
from typing import Any


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _by(d: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1%}" for k, v in d.items())


def _sources(fam: dict[str, Any]) -> list[str]:
    out = ["", "Sources (throughput in img/s; published step = batch x GPUs / throughput, "
           "published scaling = n-GPU / (n x 1-GPU throughput)):", ""]
    for name, t in fam["tables"].items():
        s, b = t["source"], t["batch_source"]
        out.append(f"- `{name}`: {s['repo']}, `{s['path']}` at commit `{s['commit']}`, "
                   f"{s['where']}. Batch per GPU: `{b['path']}`, {b['where']}. Cluster "
                   f"preset `{t['cluster']}`, device `{t['device']}`. All-reduce: "
                   f"{t['all_reduce']}.")
    for fw, p in fam["input_pipelines"].items():
        cites = "; ".join(f"{s['repo']}, `{s['path']}` at `{s['commit'][:8]}`: {s['where']}"
                          for s in p["sources"])
        out.append(f"- input pipeline, {fw} (decode on the {p['decode']}): {p['what']}. "
                   f"{cites}.")
    out += [f"- cluster `{name}`: {text}." for name, text in fam["clusters"].items()]
    out += [f"- CPU cores: {fam['cpu_source']}.", f"- TF32 peak: {fam['tf32_peak']}.",
            f"- {fam['note']}", ""]
    return out


def _head(fam: dict[str, Any]) -> list[str]:
    ddp, fit = fam["ddp_alone"], fam["fitted"]
    ddp_held = _by(fam["ddp_alone_held_out"]["worst_by_precision"])
    s = fit["s_per_image"]
    loto, mirror = fam["leave_one_table_out"], fam["mirror_split"]
    return ["## NVIDIA ResNet-50 multi-GPU scaling (DDP strategy)", "",
            f"Goal: {fam['goal']}. Error per point: the larger of |step error| and |scaling "
            "error|. DDP strategy plus the input-batch wait: held-out median "
            f"{fam['value']['median']:.1%}, worst {fam['value']['worst']:.1%} "
            f"(`{fam['worst_case']['table']}`, {fam['worst_case']['n_gpus']} GPUs; "
            f"{fam['n_held_out']} of {fam['n_points']} points held out); fit residual worst "
            f"{fam['fit_residual_worst']:.1%}; goal met: {fam['goal_met']}. Held out by "
            f"precision, worst: {_by(fam['worst_by_precision'])}. The DDP strategy alone "
            f"(nothing fitted beyond the 1-GPU rows): median {ddp['median']:.1%}, worst "
            f"{ddp['worst']:.1%} (`{ddp['worst_case']['table']}`, "
            f"{ddp['worst_case']['n_gpus']} GPUs); by precision "
            f"{_by(ddp['worst_by_precision'])}; on the held-out points alone, {ddp_held}. "
            "On this split every host-decode training row is FP32/TF32 and every host-decode "
            "held-out row is AMP: s fitted where the step is long predicts the AMP losses.",
            "",
            "Inputs (not predicted): each table's 1-GPU row, which sets the GPU's achieved "
            f"fraction of peak `{json.dumps(fit['device_efficiency_by_table'])}`. Fitted on "
            f"{fit['s_fitted_on']}: s = {s['host'] * 1e6:.1f} us per image where JPEGs are "
            f"decoded on the host CPUs, {s['gpu'] * 1e6:.1f} us per image where DALI decodes "
            "them on the GPU. Mirror split (fitted on the odd rows, even held out): s = "
            f"{mirror['s_per_image']['host'] * 1e6:.1f} / "
            f"{mirror['s_per_image']['gpu'] * 1e6:.1f} us, held-out worst "
            f"{mirror['held_out_worst']:.1%}. Each table predicted with s fitted on the other "
            f"tables: median {loto['median']:.1%}, worst {loto['worst']:.1%} "
            f"(`{loto['worst_table']}`).", "",
            "Workload: `get_workload(\"resnet50\")` (25.6 M parameters in six stages); DDP's "
            "buckets (1 MiB first, 25 MiB after) are built over one gradient per stage, not "
            "torchvision's 161 tensors; gradients are fp16 only where the framework keeps "
            "16-bit parameters (MXNet float16).", "", fam["why"], ""]


def section(fam: dict[str, Any]) -> list[str]:
    """The section: headline, every point (DDP alone and with the wait), forms tried,
    sources."""
    out = _head(fam)
    out += ["| table | GPUs | batch/GPU | decode | published s | DDP s | error | published "
            "scaling | DDP scaling | error | with wait, s | step error | scaling error | "
            "held out |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, w in zip(fam["rows"], fam["rows_with_wait"], strict=True):
        out.append(f"| {r['table']} | {r['n_gpus']} | {r['batch_per_gpu']} | {r['site']} | "
                   f"{r['published_s']} | {r['predicted_s']} | {_pct(r['error'])} | "
                   f"{r['published_efficiency']} | {r['predicted_efficiency']} | "
                   f"{_pct(r['efficiency_error'])} | {w['predicted_s']} | {_pct(w['error'])} "
                   f"| {_pct(w['efficiency_error'])} | {w['held_out']} |")
    out += ["", "Every form of the wait that was tried (all of them were scored on the "
            "held-out rows, so the choice among them is not itself held out): worst "
            "held-out error on the designated split, on its mirror, and leaving one table "
            "out.", "", "| form | held out (even fit) | held out (odd fit) | one table out |",
            "|---|---|---|---|"]
    out += [f"| {v['form']} | {v['held_out_worst']:.1%} | {v['mirror_held_out_worst']:.1%} "
            f"| {v['leave_one_table_out_worst']:.1%} |" for v in fam["variants"]]
    return out + _sources(fam)
