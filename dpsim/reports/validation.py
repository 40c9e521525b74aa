"""`python -m dpsim validate`: predicted vs published for every point, the goals, the files.

Writes benchmarks/results/validation.json (goal, value, goal_met, worst case per family),
docs/validation.md (the tables) and docs/validation_figure.json (a plotly figure as plain
JSON: model curves over the published points; no plotly needed to write it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dpsim.reports import constants_block, fsdp_scale_section, resnet_scaling_section
from dpsim.sim import fidelity, link_constants

GOALS = {"collective_median": 0.15, "collective_worst": 0.30, "memory_worst": 0.01,
         "ddp_worst": 0.15}
NOT_COVERED = [
    "reduce-scatter nccl-tests runs: one node only (one 8x H100 ring run, 128 MiB-8 GiB); "
    "none across nodes transcribed",
    "single-node H200 and B200 nccl-tests runs: none transcribed (H200 and B200 appear only "
    "in runs across nodes, GB200 in one 8-GPU NVLink domain)",
    "NCCL's channel counts and per-channel speeds (its topology search), its chunk sizes, "
    "the ring's plateau factor and the CPU type (llMaxBw, net overhead): not modelled; the "
    "LL cap, the fractions and the fill term (K x S / (S + S0) per link) are fitted instead",
    "ZeRO paper: only the model-state tables (1, 2 left half); the measured model sizes "
    "(Table 2 right half) and throughput figures include activations and buffers, not "
    "compared",
    "NVIDIA ResNet-50 tables: one machine only (the READMEs publish no multi-node rows); "
    "MXNet and TensorFlow use Horovod, modelled as DDP buckets; the input pipeline enters "
    "only as a fitted wait for the slowest rank's batch (normal per-rank jitter, s per "
    "image per decode site), not as decode work on CPU cores",
    "PyTorch DDP benchmark: only its ResNet-50 rows; the DGX-1's NVLink hybrid cube mesh is "
    "modelled as a switched NVLink 2 fabric",
]


def shipped_matches_fit(fitted: dict[str, Any]) -> bool:
    """Whether the constants dpsim ships are the ones this fit finds (to 1e-9)."""
    shipped = fidelity.collectives.DEFAULT_PARAMS
    tables = {"link_fractions": shipped.link_fractions, "ll_network_GBps": shipped.ll_network_GBps,
              "nvls_fractions": shipped.nvls_fractions, "hop_latency_us": shipped.hop_us,
              "fill_us": shipped.fill_us, "fill_bytes": shipped.fill_bytes}
    same = [k in tables[t] and abs(tables[t][k] - v) < 1e-9
            for t in tables for k, v in fitted[t].items()]
    fills = set(shipped.fill_us) == set(fitted["fill_us"])  # no fill the fit has dropped
    return all(same) and fills and abs(shipped.launch_us - fitted["launch_us"]) < 1e-9


def run() -> dict[str, Any]:
    """Evaluate every family; the results dictionary (also what the JSON file holds)."""
    coll = fidelity.collectives.evaluate()
    mem = fidelity.memory.evaluate()
    dd = fidelity.ddp.evaluate()
    worst_coll = max((r for r in coll["rows"] if r["held_out"]), key=lambda r: abs(r["error"]))
    worst_mem = max(mem["rows"], key=lambda r: abs(r["error"]))
    runs = {r["id"]: {"source": r["source"], "config": r["config"]}
            for r in fidelity.collectives.load_runs()}
    results: dict[str, Any] = {
        "device": "this machine's CPU (the model is evaluated, nothing is timed)",
        "families": {
            "nccl_tests_time": {
                "goal": f"held-out median abs. error <= {GOALS['collective_median']:.0%}, every "
                        f"held-out point <= {GOALS['collective_worst']:.0%}",
                "value": {"median": coll["held_out_median"], "worst": coll["held_out_worst"]},
                "goal_met": {
                    "median": coll["held_out_median"] <= GOALS["collective_median"],
                    "every_point": coll["held_out_worst"] <= GOALS["collective_worst"]},
                "worst_case": worst_coll,
                "fit_residual_median": coll["fit_residual_median"],
                "fit_residual_worst": coll["fit_residual_worst"],
                "by_family": coll["families"],
                "fitted_on": "even positions of each run (sizes alternate); odd ones held out",
                "model": fidelity.MODEL_NOTE,
                "fitted": coll["fitted"],
                "shipped_constants_match_fit": shipped_matches_fit(coll["fitted"]),
                "n_points": coll["n_points"], "n_held_out": coll["n_held_out"],
                "runs": runs, "rows": coll["rows"]},
            "deepspeed_memory_estimator": {
                "goal": f"every point within {GOALS['memory_worst']:.0%}",
                "value": {"median": mem["median"], "worst": mem["worst"]},
                "goal_met": mem["worst"] <= GOALS["memory_worst"], "worst_case": worst_mem,
                "fitted": "nothing", "source": mem["source"], "rows": mem["rows"]},
            "pytorch_ddp_benchmark": {
                "goal": f"DDP step time and scaling efficiency within {GOALS['ddp_worst']:.0%} "
                        "at every point",
                "value": {"median": dd["median"], "worst": dd["worst"]},
                "goal_met": dd["worst"] <= GOALS["ddp_worst"],
                "worst_case": max(dd["rows"], key=lambda r: abs(r["error"])),
                "fitted": {"v100_efficiency": dd["fitted_efficiency"],
                           "on": "the one-GPU no-DDP time; every DDP point is held out"},
                "source": dd["source"], "config": dd["config"], "rows": dd["rows"]},
            fsdp_scale_section.NAME: fsdp_scale_section.build(),
        },
        "not_covered": NOT_COVERED + fsdp_scale_section.NOT_COVERED,
    }
    results["families"].update(scaling_and_zero_families())
    return results


def scaling_and_zero_families() -> dict[str, Any]:
    """NVIDIA's ResNet-50 scaling tables and the ZeRO paper's tables (goal per family)."""
    return {"nvidia_resnet50_scaling": fidelity.resnet_scaling.family(fidelity.RESNET_EVERY),
            "zero_paper_tables": fidelity.zero_paper.family(fidelity.ZERO_PAPER_EVERY)}


FIGURE_FROM_BYTES = 1024  # smaller messages are in the table; the figure shows 8 decades


def figure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Published times (markers) and the model (lines) per run, as a plotly figure dict
    (`rows`: `results["families"]["nccl_tests_time"]["rows"]` or
    `fidelity.collectives.shipped_rows()`)."""
    data: list[dict[str, Any]] = []
    for run in dict.fromkeys(r["run"] for r in rows):
        mine = [r for r in rows if r["run"] == run]
        x = [r["nbytes"] for r in mine]
        data.append({"type": "scatter", "mode": "lines", "name": f"{run} (dpsim model)",
                     "x": x, "y": [r["predicted_us"] for r in mine]})
        data.append({"type": "scatter", "mode": "markers", "name": f"{run} (published)",
                     "x": x, "y": [r["published_us"] for r in mine]})
    top = max((r["nbytes"] for r in rows), default=FIGURE_FROM_BYTES * 10)
    return {"data": data, "layout": {
        "title": {"text": "collective time: published nccl-tests (markers) vs dpsim "
                          f"(simulated, lines), from {FIGURE_FROM_BYTES} B"},
        "xaxis": {"title": {"text": "bytes"}, "type": "log",  # at most 8 decades read well
                  "range": [math.log10(FIGURE_FROM_BYTES), math.log10(top) + 0.1]},
        "yaxis": {"title": {"text": "microseconds"}, "type": "log"}}}


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _source(src: dict[str, Any]) -> str:
    if src.get("kind") == "issue":
        return f"{src['repo']}, {src['url']}"
    return f"{src['repo']}, `{src['path']}` at commit `{src['commit']}`"


def _constants() -> list[str]:
    out = ["| constant | value | source |", "|---|---|---|"]
    lc = link_constants
    tables: list[tuple[str, dict[Any, Any]]] = [
        ("achieved fraction, kind", lc.ACHIEVED_FRACTION), ("achieved fraction", lc.LINK_FRACTION),
        ("LL rate across nodes (GB/s per node)", lc.LL_NETWORK_GBPS),
        ("NVLS fraction", lc.NVLS_FRACTIONS),
        ("network latency per step (us)", lc.HOP_LATENCY_US),
        ("fill term, its limit (us)", lc.FILL_US),
        ("fill term, half-way size (bytes)", lc.FILL_BYTES),
        ("protocol bandwidth / Simple's", lc.PROTOCOL_BANDWIDTH),
        ("NCCL base latency (us)", lc.BASE_LATENCY_US),
        ("NCCL hop latency (us)", lc.HW_LATENCY_US),
        ("NCCL net overhead (us)", {"per step": lc.NET_OVERHEAD_US})]
    for label, table in tables:
        out += [f"| {label}, {k if isinstance(k, str) else ' / '.join(k)} | {c.value:.4g} | "
                f"{c.source} |" for k, c in table.items()]
    return [*out, f"| launch latency (us) | {lc.LAUNCH_US.value} | {lc.LAUNCH_US.source} |"]


def _families(coll: dict[str, Any]) -> list[str]:
    out = ["| family (held out) | points | median | worst | within 30 % | worst point |",
           "|---|---|---|---|---|---|"]
    for fam, f in coll["by_family"].items():
        w = f["worst_case"]
        out.append(f"| {fam} | {f['n_held_out']} | {f['median']:.1%} | {f['worst']:.1%} | "
                   f"{f['within_30_percent']:.0%} | `{w['run']}` at {w['nbytes']} B, "
                   f"{_pct(w['error'])} ({w['algorithm']}) |")
    return out


def _worst(coll: dict[str, Any], n: int = 12) -> list[str]:
    held = sorted((r for r in coll["rows"] if r["held_out"]), key=lambda r: -abs(r["error"]))
    out = ["| run | bytes | published us | dpsim us | error | dpsim's pair | why |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {r['run']} | {r['nbytes']} | {r['published_us']} | {r['predicted_us']} | "
            f"{_pct(r['error'])} | {r['algorithm']} | "
            f"{fidelity.WHY_RUN.get(r['run'], fidelity.WHY_DEFAULT)} |"
            for r in held[:n]]
    return out


def markdown(results: dict[str, Any]) -> str:
    """docs/validation.md: goals, fitted constants, every point, what is not covered."""
    coll = results["families"]["nccl_tests_time"]
    mem = results["families"]["deepspeed_memory_estimator"]
    dd = results["families"]["pytorch_ddp_benchmark"]
    out = ["# Validation against published measurements", "",
           "Generated by `python -m dpsim validate` (do not edit). Errors are "
           "predicted / published - 1. The collective model's free constants are fitted on "
           "half of the points (even positions of each run); the **held-out** half is the "
           "model's error, and the fit residual is shown only as a residual.", "",
           "| family | goal | held-out median | worst | goal met |", "|---|---|---|---|---|",
           f"| nccl-tests collective time | {coll['goal']} | {coll['value']['median']:.1%} | "
           f"{coll['value']['worst']:.1%} | median: {coll['goal_met']['median']}, every "
           f"point: {coll['goal_met']['every_point']} |",
           f"| DeepSpeed memory estimator | {mem['goal']} | {mem['value']['median']:.2%} | "
           f"{mem['value']['worst']:.2%} | {mem['goal_met']} (nothing fitted) |",
           f"| PyTorch DDP benchmark (ResNet-50, V100) | {dd['goal']} | "
           f"{dd['value']['median']:.1%} | {dd['value']['worst']:.1%} | {dd['goal_met']} |",
           *_summary_rows(results),
           fsdp_scale_section.summary_row(results["families"][fsdp_scale_section.NAME]), "",
           f"Fit residual (training half, not a prediction error): median "
           f"{coll['fit_residual_median']:.1%}, worst {coll['fit_residual_worst']:.1%}.", "",
           "## nccl-tests by family", "", *_families(coll), "", fidelity.MODEL_NOTE, "",
           "## Worst held-out points", "", *_worst(coll), "",
           "Figure: `docs/validation_figure.json` (plotly JSON; open with "
           "`plotly.io.read_json`).", "", "## Constants", "",
           f"Fitted: `{json.dumps(coll['fitted'])}`", "", *_constants(), "", "## Sources", ""]
    for run, info in coll["runs"].items():
        out.append(f"- `{run}`: {_source(info['source'])}, {info['source']['where']}. "
                   f"Configuration: {info['config']}.")
    s = mem["source"]
    out += [f"- DeepSpeed memory estimator: {s['repo']}, `{s['path']}` at commit "
            f"`{s['commit']}`."]
    s = dd["source"]
    out += [f"- PyTorch DDP benchmark: {s['repo']}, `{s['path']}` at commit `{s['commit']}`, "
            f"{s['where']}. Configuration: {dd['config']}.", "", "## Every point", "",
            "| run | bytes | published us | dpsim us | error | algorithm/protocol | held out |",
            "|---|---|---|---|---|---|---|"]
    out += [f"| {r['run']} | {r['nbytes']} | {r['published_us']} | {r['predicted_us']} | "
            f"{_pct(r['error'])} | {r['algorithm']} | {r['held_out']} |" for r in coll["rows"]]
    out += ["", "| memory point | published GB | dpsim GB | error | where |",
            "|---|---|---|---|---|"]
    out += [f"| {r['id']} | {r['published_GB']} | {r['predicted_GB']} | {_pct(r['error'])} | "
            f"{r['where']} |" for r in mem["rows"]]
    out += ["", f"DDP (fitted V100 efficiency {dd['fitted']['v100_efficiency']} on the no-DDP "
            "row; every row below is held out):", "",
            "| GPUs | published s | dpsim s | error | published scaling | dpsim scaling | "
            "error |", "|---|---|---|---|---|---|---|"]
    out += [f"| {r['n_gpus']} | {r['published_s']} | {r['predicted_s']} | {_pct(r['error'])} "
            f"| {r['published_efficiency']} | {r['predicted_efficiency']} | "
            f"{_pct(r['efficiency_error'])} |" for r in dd["rows"]]
    out += ["", *_sections(results)]
    out += fsdp_scale_section.markdown(results["families"][fsdp_scale_section.NAME])
    out += ["", "## Not covered", ""] + [f"- {n}" for n in results["not_covered"]]
    return "\n".join(out) + "\n"


def _summary_rows(results: dict[str, Any]) -> list[str]:
    """The summary table's rows of the ResNet-50 scaling and ZeRO paper families."""
    fam = results["families"]
    rows = []
    for key, name, fmt in (("nvidia_resnet50_scaling", "NVIDIA ResNet-50 tables (DDP, 1-16 "
                            "GPUs)", ".1%"), ("zero_paper_tables", "ZeRO paper Tables 1-2",
                                              ".2%")):
        if key in fam:
            f = fam[key]
            rows.append(f"| {name} | {f['goal']} | {f['value']['median']:{fmt}} | "
                        f"{f['value']['worst']:{fmt}} | {f['goal_met']} |")
    return rows


def _sections(results: dict[str, Any]) -> list[str]:
    """docs/validation.md's sections of the ResNet-50 scaling and ZeRO paper families."""
    fam = results["families"]
    out: list[str] = []
    if "nvidia_resnet50_scaling" in fam:
        out += resnet_scaling_section.section(fam["nvidia_resnet50_scaling"])
    if "zero_paper_tables" in fam:
        out += fidelity.zero_paper.section(fam["zero_paper_tables"])
    return out


def main(root: str = ".", write: bool = True, write_constants: bool = False) -> int:
    """Print every point and the summary; write the three files under `root`
    (`write_constants`: also the fit's constants into link_constants.py's fitted block)."""
    results = run()
    coll = results["families"]["nccl_tests_time"]
    if write_constants:
        path = constants_block.write(coll["fitted"], Path(root))
        print(f"wrote the fitted constants to {path}; run python -m dpsim validate again so "
              "that the results and pages use them")
    for r in coll["rows"]:
        print(f"{r['run']:28s} {r['nbytes']:>12d} B  published {r['published_us']:>10.1f} us"
              f"  dpsim {r['predicted_us']:>10.1f} us  {_pct(r['error'])}"
              f"{'  held out' if r['held_out'] else ''}")
    mem = results["families"]["deepspeed_memory_estimator"]
    for m in mem["rows"]:
        print(f"{m['id']:28s} published {m['published_GB']} GB  dpsim {m['predicted_GB']} GB"
              f"  {_pct(m['error'])}")
    dd = results["families"]["pytorch_ddp_benchmark"]
    for d in dd["rows"]:
        print(f"DDP resnet50 {d['n_gpus']:>2} GPUs  published {d['published_s']} s  dpsim "
              f"{d['predicted_s']} s  {_pct(d['error'])}  scaling {_pct(d['efficiency_error'])}")
    print("\n".join(fsdp_scale_section.console(results["families"][fsdp_scale_section.NAME])))
    print(f"collectives held out: median {coll['value']['median']:.1%}, worst "
          f"{coll['value']['worst']:.1%}; memory worst {mem['value']['worst']:.2%}; DDP worst "
          f"{dd['value']['worst']:.1%}")
    for key in ("nvidia_resnet50_scaling", "zero_paper_tables"):
        f = results["families"][key]
        print(f"{key}: median {f['value']['median']:.2%}, worst {f['value']['worst']:.2%}, "
              f"goal met: {f['goal_met']}")
    results["goals"] = fidelity.goals(results)
    results["goal_met"] = all(g["goal_met"] for g in results["goals"])
    if write:
        base = Path(root)
        (base / "benchmarks" / "results").mkdir(parents=True, exist_ok=True)
        (base / "benchmarks/results/validation.json").write_text(
            json.dumps(results, indent=1) + "\n")
        (base / "docs").mkdir(exist_ok=True)
        (base / "docs/validation.md").write_text(markdown(results))
        (base / "docs/validation_figure.json").write_text(json.dumps(figure(coll["rows"])) + "\n")
    return 0
