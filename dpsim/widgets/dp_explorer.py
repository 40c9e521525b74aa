"""DataParallel explorer: sliders for N, model, batch and output size -> device-0 imbalance.

`explore(...)` runs the simulation and summarises it, `render(...)` turns that into text
and a figure (both testable without widgets); `dp_explorer()` wires sliders to `render`
with `widgets.dashboard`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpsim.sim import (
    CLUSTERS,
    PRESETS,
    DPConfig,
    Trace,
    Workload,
    device0_extra_bytes,
    dp_summary,
    get_cluster,
    get_workload,
    require_choice,
    require_finite,
    require_int,
    simulate,
    step_result,
    with_output_features,
)
from dpsim.viz.memory_per_device import peak_per_device
from dpsim.viz.style import human_bytes

MODELS = ("mlp", *PRESETS)
OUTPUT_CHOICES = (0, 10, 1_000, 100_000, 10_000_000)  # 0: the model's own output size
SUMMARY_KEYS = ("model", "chunks", "device 0 peak", "largest other peak", "imbalance", "fits",
                "step_time_s", "extra_at_loss")


def small_mlp() -> Workload:
    """Chapter 1's MLP (32 -> 256 -> 256 -> 256 -> 10) as a Workload."""
    from dataclasses import replace

    import torch

    from dpsim.runtime.capture import workload_from_module
    from dpsim.runtime.models import mlp

    captured = workload_from_module(mlp(32, 256, 3, 10), torch.randn(2, 32))
    return replace(captured, name="MLP 32-256-256-256-10")


def get_model(name: str, out_features: int = 0) -> Workload:
    """A workload by name ("mlp" or a preset), with out_features outputs if > 0."""
    require_choice("name", name, MODELS)
    require_int("out_features", out_features, 0)
    workload = small_mlp() if name == "mlp" else get_workload(name)
    return with_output_features(workload, out_features) if out_features else workload


def explore(model: str = "gpt2-124m", n_devices: int = 4, batch_size: int = 32,
            out_features: int = 0, cluster: str = "h100-node") -> tuple[Trace, dict[str, Any]]:
    """Simulate one DP step; return the trace and a summary of device 0's imbalance (bytes, s)."""
    check_setting(model, n_devices, batch_size, out_features, cluster)
    c = get_cluster(cluster)
    workload = get_model(model, out_features)
    config = DPConfig(n_devices=n_devices, batch_size=batch_size)
    trace = simulate(workload, c, config)
    step, facts = step_result(trace), dp_summary(trace)
    peaks = step.peak_bytes
    summary: dict[str, Any] = {
        "model": workload.name,
        "chunks": list(facts.chunk_sizes),
        "device 0 peak": peaks[0],
        "largest other peak": max(peaks[1:], default=0),
        "imbalance": facts.imbalance,
        "fits": peaks[0] <= c.device.memory_bytes,
        "step_time_s": step.step_s,
        "extra_at_loss": device0_extra_bytes(workload, config) if n_devices > 1 else {},
    }
    return trace, summary


def check_setting(model: str, n_devices: int, batch_size: int, out_features: int,
                  cluster: str) -> None:
    """Raise ValueError naming the first argument of `explore` that is not allowed."""
    require_choice("model", model, MODELS)
    require_choice("cluster", cluster, CLUSTERS)
    require_int("n_devices", n_devices, 1, get_cluster(cluster).devices_per_node)
    require_int("batch_size", batch_size, 1)
    require_int("out_features", out_features, 0)


def describe(summary: dict[str, Any]) -> str:
    """The summary as a few lines of text."""
    missing = [k for k in SUMMARY_KEYS if k not in summary] if isinstance(summary, Mapping) else []
    if not isinstance(summary, Mapping) or missing:
        raise ValueError(f"summary={summary!r} is not a summary from explore(); it needs the keys "
                         + ", ".join(repr(k) for k in SUMMARY_KEYS))
    for key in ("device 0 peak", "largest other peak", "step_time_s"):
        require_finite(f"summary[{key!r}]", summary[key], 0)
    extra = ", ".join(f"{k} {human_bytes(v)}" for k, v in summary["extra_at_loss"].items() if v)
    ratio = summary["imbalance"]
    lines = [
        f"simulated: {summary['model']}, chunks {summary['chunks']}",
        f"device 0 peak {human_bytes(summary['device 0 peak'])}, largest other "
        f"{human_bytes(summary['largest other peak'])}"
        + (f" (device 0 holds {ratio:.2f}x)" if ratio != float("inf") else ""),
        f"step {summary['step_time_s'] * 1e3:.2f} ms"
        + ("" if summary["fits"] else "; device 0 runs OUT OF MEMORY"),
    ]
    if extra:
        lines.append(f"extra on device 0 when the loss is computed: {extra}")
    return "\n".join(lines)


def render(model: str, n_devices: int, batch_size: int, out_features: int,
           cluster: str = "h100-node") -> list[Any]:
    """[summary text, peak memory per device figure] for one setting of the controls."""
    check_setting(model, n_devices, batch_size, out_features, cluster)
    trace, summary = explore(model, n_devices, batch_size, out_features, cluster)
    limit = get_cluster(cluster).device.memory_bytes
    return [describe(summary), peak_per_device(trace, unit="GiB", limit_bytes=limit)]


def dp_explorer(cluster: str = "h100-node") -> Any:
    """Sliders for N, model, batch and output size; peak memory per device redrawn."""
    require_choice("cluster", cluster, CLUSTERS)
    import ipywidgets as w

    from dpsim.widgets.dashboard import dashboard

    controls = {
        "n_devices": w.IntSlider(value=4, min=1, max=8, description="N devices"),
        "model": w.Dropdown(options=list(MODELS), value="gpt2-124m", description="model"),
        "batch_size": w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                                        value=32, description="batch"),
        "out_features": w.SelectionSlider(
            options=[("model's", 0)] + [(f"{v:,}", v) for v in OUTPUT_CHOICES[1:]], value=0,
            description="outputs"),
    }
    return dashboard(controls, lambda **v: render(cluster=cluster, **v), columns=2)
