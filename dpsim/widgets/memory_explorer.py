"""Chapter 1 explorer: model preset, device, precision, optimizer and batch -> memory, time."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from dpsim.sim import (
    DEVICES,
    OPTIMIZERS,
    PRESETS,
    MemoryBreakdown,
    SingleConfig,
    breakdown,
    get_workload,
    policy_model_state_bytes,
    precision_policy,
    require_choice,
    require_int,
    simulate,
    single_summary,
    step_result,
)
from dpsim.viz.memory import breakdown_bars
from dpsim.viz.style import add_limit
from dpsim.widgets.dashboard import dashboard

PRECISION_CHOICES = ("fp32", "bf16 autocast")  # autocast: torch's scheme, fp32 states


def explore(model: str, device: str, precision: str, optimizer: str, batch_size: int
            ) -> list[Any]:
    """Simulate one step and return [figure, summary line] (memory in GiB, time in ms)."""
    require_choice("model", model, PRESETS)
    require_choice("device", device, DEVICES)
    require_choice("precision", precision, PRECISION_CHOICES)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_int("batch_size", batch_size, 1)
    workload = get_workload(model)
    dev = DEVICES[device]
    mixed = precision == "bf16 autocast"
    # compute and activations in bf16; the states' total is the same in either scheme
    cfg = SingleConfig(batch_size=batch_size, optimizer=optimizer,
                       dtype="bf16" if mixed else "fp32", mixed_precision=mixed)
    trace = simulate(workload, dev, cfg)
    pred: MemoryBreakdown = breakdown(trace)
    if mixed:  # torch.autocast keeps fp32 parameters, gradients and optimizer state
        states = policy_model_state_bytes(workload.n_params, workload.n_param_tensors,
                                          precision_policy("torch_amp"), optimizer)
        pred = MemoryBreakdown(states.parameters, states.gradients, states.optimizer,
                               pred.activations)
    column = f"{workload.name}, batch {batch_size}"
    fig: go.Figure = breakdown_bars({column: pred}, title="", unit="GiB")
    note = add_limit(fig, [column], pred.total / 1024**3, dev.memory_GiB, "GiB")
    fig.update_layout(title={"text": f"Simulated memory on one {dev.name}{note}"})
    facts = single_summary(trace)
    verdict = "fits" if facts.fits else "OUT OF MEMORY"
    line = (f"simulated: {pred.total / 1024**3:.1f} GiB ({verdict}); "
            f"step {step_result(trace).step_s * 1e3:.1f} ms; "
            f"{facts.samples_per_s:.1f} samples/s")
    return [fig, line]


def memory_explorer() -> widgets.VBox:
    """The dashboard: change any control and the figure updates."""
    controls = {
        "model": widgets.Dropdown(options=list(PRESETS), value="gpt2-124m", description="model"),
        "device": widgets.Dropdown(options=[k for k, d in DEVICES.items() if d.kind == "gpu"],
                                   value="h100-80gb", description="device"),
        "precision": widgets.ToggleButtons(options=list(PRECISION_CHOICES), value="fp32",
                                           description="precision",
                                           style={"button_width": "auto"}),
        "optimizer": widgets.Dropdown(options=list(OPTIMIZERS), value="adam",
                                      description="optimizer"),
        "batch_size": widgets.IntSlider(value=8, min=1, max=128, description="batch"),
    }
    return dashboard(controls, explore)
