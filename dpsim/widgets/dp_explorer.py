"""DataParallel explorer: sliders for N, model, batch and output size -> device-0 imbalance.

`explore(...)` runs the simulation and summarises it (testable without widgets);
`dp_explorer()` wires ipywidgets sliders to it and redraws the peak-memory bars.
"""

from __future__ import annotations

from typing import Any

from dpsim.hardware import get_cluster
from dpsim.strategies.dp import DPConfig, device0_extra_bytes, simulate, with_output_features
from dpsim.trace import Trace
from dpsim.viz.memory_per_device import peak_per_device
from dpsim.viz.style import human_bytes
from dpsim.workload import PRESETS, Workload, get_workload

MODELS = ("mlp", *PRESETS)
OUTPUT_CHOICES = (0, 10, 1_000, 100_000, 10_000_000)  # 0: the model's own output size


def small_mlp() -> Workload:
    """Chapter 1's MLP (32 -> 256 -> 256 -> 256 -> 10) as a Workload."""
    from dataclasses import replace

    import torch

    from dpsim.models import mlp

    captured = Workload.from_module(mlp(32, 256, 3, 10), torch.randn(2, 32))
    return replace(captured, name="MLP 32-256-256-256-10")


def get_model(name: str, out_features: int = 0) -> Workload:
    """A workload by name ("mlp" or a preset), with out_features outputs if > 0."""
    workload = small_mlp() if name == "mlp" else get_workload(name)
    return with_output_features(workload, out_features) if out_features else workload


def explore(model: str = "gpt2-124m", n_devices: int = 4, batch_size: int = 32,
            out_features: int = 0, cluster: str = "h100-node") -> tuple[Trace, dict[str, Any]]:
    """Simulate one DP step; return the trace and a summary of device 0's imbalance."""
    c = get_cluster(cluster)
    workload = get_model(model, out_features)
    config = DPConfig(n_devices=n_devices, batch_size=batch_size)
    trace = simulate(workload, c, config)
    peaks = trace.meta["peak_bytes"]
    summary: dict[str, Any] = {
        "model": workload.name,
        "chunks": trace.meta["chunk_sizes"],
        "device 0 peak": peaks[0],
        "largest other peak": max(peaks[1:], default=0),
        "imbalance": trace.meta["imbalance"],
        "fits": peaks[0] <= c.device.memory_bytes,
        "step_time_s": trace.meta["step_time_s"],
        "extra_at_loss": device0_extra_bytes(workload, config) if n_devices > 1 else {},
    }
    return trace, summary


def describe(summary: dict[str, Any]) -> str:
    """The summary as a few lines of HTML."""
    extra = ", ".join(f"{k} {human_bytes(v)}" for k, v in summary["extra_at_loss"].items() if v)
    ratio = summary["imbalance"]
    lines = [
        f"<b>{summary['model']}</b>: chunks {summary['chunks']}",
        f"device 0 peak {human_bytes(summary['device 0 peak'])}, largest other "
        f"{human_bytes(summary['largest other peak'])}"
        + (f" (device 0 holds {ratio:.2f}x)" if ratio != float("inf") else ""),
        f"step {summary['step_time_s'] * 1e3:.2f} ms (simulated)"
        + ("" if summary["fits"] else " · <span style='color:red'>device 0 runs out of "
           "memory</span>"),
    ]
    if extra:
        lines.append(f"extra on device 0 when the loss is computed: {extra}")
    return "<br>".join(lines)


def dp_explorer(cluster: str = "h100-node") -> Any:
    """Sliders for N, model, batch and output size; peak memory per device redrawn."""
    import ipywidgets as w
    from IPython.display import display

    n = w.IntSlider(value=4, min=1, max=8, description="N devices")
    model = w.Dropdown(options=list(MODELS), value="gpt2-124m", description="model")
    batch = w.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512], value=32,
                              description="batch")
    out = w.SelectionSlider(options=[("model's", 0)] + [(f"{v:,}", v) for v in
                                                        OUTPUT_CHOICES[1:]],
                            value=0, description="outputs")
    text = w.HTML()
    plot = w.Output()

    def redraw(*_: Any) -> None:
        trace, summary = explore(model.value, n.value, batch.value, out.value, cluster)
        text.value = describe(summary)
        plot.clear_output(wait=True)
        with plot:
            display(peak_per_device(trace, unit="GiB",
                                    limit_bytes=get_cluster(cluster).device.memory_bytes))

    for control in (n, model, batch, out):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([n, model]), w.HBox([batch, out]), text, plot])
