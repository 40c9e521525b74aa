"""Figures for the myths lab: the verdict table, and one evidence figure per claim."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import plotly.graph_objects as go

from dpsim.myths.evidence import (
    BatchSplit,
    DDPRun,
    DPAdvice,
    DPDeviceZero,
    DPMemory,
    DPUpdate,
    DPvsDDP,
    FSDPCost,
    GILEvidence,
)
from dpsim.myths.judge import Verdict
from dpsim.viz.style import finish

VERDICT_COLORS = {"right": "#C7E9C0", "wrong": "#FCBBA1", "half right": "#FDE0A1",
                  "right, partly untested": "#E5F5E0",
                  "inconclusive here": "#E0E0E0", "untestable here": "#F0F0F0"}
PALETTE = ("#4C78A8", "#F58518", "#54A24B", "#E45756")


def verdict_table(verdicts: Sequence[Verdict]) -> go.Figure:
    """A table: number, claim, verdict (coloured), where the evidence comes from."""
    colors = [VERDICT_COLORS[v.verdict] for v in verdicts]
    white = ["white"] * len(verdicts)
    fig = go.Figure(go.Table(
        columnwidth=[4, 60, 9, 18],
        header={"values": ["#", "claim", "verdict", "evidence"], "align": "left",
                "fill_color": "#EEEEEE"},
        cells={"values": [[v.number for v in verdicts], [v.claim for v in verdicts],
                          [v.verdict for v in verdicts], [v.source for v in verdicts]],
               "align": "left", "fill_color": [white, white, colors, white]}))
    return finish(fig, "Claims and verdicts (evidence measured here, re-enacted, published, "
                       "simulated)",
                  height=120 + 48 * len(verdicts))


def _bars(title: str, unit: str, categories: Sequence[str],
          series: dict[str, Sequence[float | None]]) -> go.Figure:
    fig = go.Figure([go.Bar(name=name, x=list(categories), y=list(values),
                            marker_color=PALETTE[i % len(PALETTE)])
                     for i, (name, values) in enumerate(series.items())])
    fig.update_yaxes(title_text=unit)
    return finish(fig, title, barmode="group", height=380)


def _devices(n: int, word: str = "device") -> list[str]:
    return [f"{word} {d}" for d in range(n)]


def _f01(e: BatchSplit) -> go.Figure:
    per_rank = e["ddp_samples_per_rank"] or []
    n = max(len(e["dp_chunks"]), len(per_rank))
    return _bars(f"Samples per device: DP given batch {e['dp_batch']} (re-enacted), DDP given "
                 f"batch_size {e['ddp_batch_size_arg']} (measured)", "samples", _devices(n),
                 {"DataParallel (re-enacted)": e["dp_chunks"],
                  f"DDP ({e['ddp_world_size']} gloo processes)": per_rank})


def _f04(e: DPDeviceZero) -> go.Figure:
    peaks = e["sim_peak_GiB"]
    return _bars("DataParallel: peak memory per device (simulated, 4 x A100 over PCIe)", "GiB",
                 _devices(len(peaks["gpt2-124m"])),
                 {"GPT-2 124M (50257 outputs per token)": peaks["gpt2-124m"],
                  "ResNet-50 (1000 outputs)": peaks["resnet50"]})


def _f05(e: DPUpdate) -> go.Figure:
    phases = e["phases_ms"]
    fig = go.Figure(go.Bar(y=list(phases), x=[v[1] - v[0] for v in phases.values()],
                           base=[v[0] for v in phases.values()], orientation="h",
                           marker_color=PALETTE[0]))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="ms")
    return finish(fig, "One DataParallel step, phase by phase (simulated): replicate comes "
                       "first, nothing is copied after the optimizer", height=380)


def _f06(e: GILEvidence) -> go.Figure:
    return _bars("Speed-up of 2 workers on pure-Python work, and the GIL bound for 4 threads",
                 "speed-up", ["2 threads (simulated)", "2 threads (measured)",
                              "2 processes (measured)", "4 threads, many small ops (bound)",
                              "4 threads, big matmuls (bound)"],
                 {"speed-up": [e["simulated_threads_speedup_2_python"], e["threads_speedup_2"],
                               e["processes_speedup_2"],
                               e["predicted_threads_speedup_4_small_ops"],
                               e["predicted_threads_speedup_4_big_matmuls"]]})


def _f07(e: DDPRun) -> go.Figure:
    r = e["ranks"] or []
    return _bars("Sum of all parameters on each rank (measured): different seeds, equal after "
                 "wrapping in DDP, equal after each rank's own optimizer step", "sum",
                 ["before DDP()", "after DDP()", "after optimizer.step()"],
                 {f"rank {x['rank']}": [x["params_before_wrap"], x["params_after_wrap"],
                                        x["params_after_step"]] for x in r})


def _f08(e: DDPRun) -> go.Figure:
    sent = e["ring_sent_bytes"]
    return _bars("Bytes each rank sends to average 1 MiB of gradients over 8 ranks (simulated)",
                 "bytes", _devices(len(sent), "rank"),
                 {"ring all-reduce (what DDP does)": sent,
                  "reduce to rank 0 + broadcast (the claim)":
                  e["reduce_then_broadcast_sent_bytes"]})


def _f09(e: DDPRun) -> go.Figure:
    r = e["ranks"] or []
    measured = [4 * n / 2**20 for n in (r[0]["bucket_numel"] if r else [])]
    predicted = [b / 2**20 for b in e["predicted_bucket_bytes"]]
    n = max(len(measured), len(predicted))
    return _bars("DDP buckets of 8 Linear(1024, 1024): measured all-reduce calls vs dpsim",
                 "MiB", [f"bucket {i}" for i in range(n)],
                 {"measured (comm hook)": measured, "dpsim.sim.strategies.ddp": predicted})


def _f10(e: DPvsDDP) -> go.Figure:
    rows = e["rows"]
    return _bars("One step, same global batch (simulated)", "ms", [r["regime"] for r in rows],
                 {"DataParallel": [r["dp_ms"] for r in rows],
                  "DDP": [r["ddp_ms"] for r in rows]})


def _f11(e: DPMemory) -> go.Figure:
    n = len(e["dp_params_GiB"])
    return _bars("GPT-2 124M, 4 devices: parameters per device (simulated)", "GiB",
                 _devices(n), {"DataParallel": e["dp_params_GiB"],
                               "DDP": [e["ddp_params_GiB"]] * n})


def _f15(e: FSDPCost) -> go.Figure:
    return _bars("7B model on 8 devices (simulated): memory per device and traffic per step",
                 "GiB / GB", ["model states per device (GiB)", "traffic per step (GB)"],
                 {"DDP": [e["ddp_GiB"], e["ddp_traffic_GB"]],
                  "FSDP / ZeRO-3": [e["fsdp_GiB"], e["fsdp_traffic_GB"]]})


def _f16(e: DPAdvice) -> go.Figure:
    return _bars("Scaling efficiency in one 8 x H100 node, GPT-2 124M (simulated)",
                 "efficiency", [str(n) for n in e["devices"]],
                 {"DataParallel": e["dp_efficiency"], "DDP": e["ddp_efficiency"]})


def _f18(e: DDPRun) -> go.Figure:
    ns: dict[str, Any] = e["ranks"][0]["no_sync"] if e["ranks"] else {}
    return _bars(f"All-reduce calls over {ns.get('micro_batches')} micro-batches (measured)",
                 "calls", ["without no_sync", "with no_sync"],
                 {"all-reduce calls": [ns.get("all_reduce_calls_without_no_sync"),
                                       ns.get("all_reduce_calls_with_no_sync")]})


# each figure takes its claim's piece of evidence (`dpsim.myths.evidence.GATHER`)
FIGURES: dict[int, Callable[[Any], go.Figure]] = {
    1: _f01, 4: _f04, 5: _f05, 6: _f06, 7: _f07, 8: _f08, 9: _f09, 10: _f10, 11: _f11,
    15: _f15, 16: _f16, 18: _f18,
}


def checks_table(v: Verdict) -> go.Figure:
    """The claim's checks: outcome, kind of evidence, and whether it decides the verdict."""
    fig = go.Figure(go.Table(
        columnwidth=[60, 12, 14, 8],
        header={"values": ["check", "outcome", "kind", "role"], "align": "left",
                "fill_color": "#EEEEEE"},
        cells={"values": [[("the model says: " if c.kind == "the dpsim model" else "") + c.name
                           for c in v.checks], [c.outcome for c in v.checks],
                          [c.kind for c in v.checks],
                          ["decides" if c.deciding else "detail" for c in v.checks]],
               "align": "left"}))
    return finish(fig, f"Claim {v.number}: {v.verdict.upper()} ({v.source})",
                  height=140 + 40 * len(v.checks))


def evidence_view(v: Verdict) -> list[Any]:
    """What the evidence browser shows for one claim: its checks, then its figure if any."""
    can_draw = v.number in FIGURES and (v.evidence.get("ranks", True) is not None)
    return [checks_table(v), *([FIGURES[v.number](v.evidence)] if can_draw else [])]
