"""ZeRO explorer: model size, N, precision, optimizer, checkpointing, device memory -> fit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import ipywidgets as widgets

from dpsim.sim import (
    H100_80GB,
    NVLINK4,
    OPTIMIZERS,
    PRECISIONS,
    Cluster,
    FSDPConfig,
    Workload,
    compare_stages,
    fsdp_summary,
    get_workload,
    require_bool,
    require_choice,
    require_finite,
    require_int,
    transformer,
)
from dpsim.viz.fsdp import device_grid, zero_bars
from dpsim.widgets.dashboard import dashboard

MODEL_SIZES = ("124M", "1.3B", "7B", "70B", "175B")
DEVICE_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
DEVICE_MEMORY_GIB = (16, 24, 40, 80, 141)


def model_for(size: str) -> Workload:
    """A transformer of the named size (presets, and a 96-layer GPT-3-like 175B)."""
    require_choice("size", size, MODEL_SIZES)
    presets = {"124M": "gpt2-124m", "1.3B": "gpt-1.3b", "7B": "llama-7b", "70B": "llama-70b"}
    if size in presets:
        return get_workload(presets[size])
    return transformer("175B transformer", 96, 12288, 96, 2048, 50257)


def cluster_for(n_devices: int, memory_GiB: float) -> Cluster:
    """n_devices H100-class GPUs (8 per NVLink node, InfiniBand between) of `memory_GiB`."""
    require_int("n_devices", n_devices, 1)
    require_finite("memory_GiB", memory_GiB, 0, low_inclusive=False)
    node = Cluster("H100 node", replace(H100_80GB, memory_GiB=float(memory_GiB)), 8, 1, NVLINK4)
    return node.with_devices(n_devices)


def explore(model: str, n_devices: int, precision: str, optimizer: str,
            checkpointing: bool, memory_GiB: float, batch_size: int) -> list[Any]:
    """Simulate the four ZeRO stages; return [bars, device grid, summary line]."""
    require_choice("model", model, MODEL_SIZES)
    require_choice("precision", precision, PRECISIONS)
    require_choice("optimizer", optimizer, OPTIMIZERS)
    require_bool("checkpointing", checkpointing)
    require_int("batch_size", batch_size, 1)
    cluster = cluster_for(n_devices, memory_GiB)
    workload = model_for(model)
    cfg = FSDPConfig(batch_size=batch_size, precision=precision, optimizer=optimizer,
                     activation_checkpointing=checkpointing)
    traces = compare_stages(workload, cluster, cfg)
    limit = cluster.device.memory_bytes
    facts = {k: fsdp_summary(t) for k, t in traces.items()}
    bars = zero_bars({k: f.breakdown for k, f in facts.items()}, limit, unit="GiB",
                     title=f"{workload.name} on {n_devices} x {memory_GiB:g} GiB: simulated peak "
                           "memory per device")
    grid = device_grid({k: f.fits for k, f in facts.items()}, n_devices)
    fitting = [k for k, f in facts.items() if f.fits]
    line = (f"simulated: fits under {', '.join(fitting)}" if fitting
            else "simulated: out of memory under every stage; add devices or checkpointing")
    return [bars, grid, line]


def zero_explorer() -> widgets.VBox:
    """The dashboard: every control re-simulates the four stages and redraws."""
    controls = {
        "model": widgets.SelectionSlider(options=list(MODEL_SIZES), value="7B",
                                         description="model"),
        "n_devices": widgets.SelectionSlider(options=list(DEVICE_COUNTS), value=8,
                                             description="N devices"),
        "precision": widgets.ToggleButtons(options=list(PRECISIONS), value="mixed",
                                           description="precision",
                                           style={"button_width": "auto"}),
        "optimizer": widgets.Dropdown(options=list(OPTIMIZERS), value="adam",
                                      description="optimizer"),
        "checkpointing": widgets.Checkbox(value=False, description="activation checkpointing"),
        "memory_GiB": widgets.SelectionSlider(options=list(DEVICE_MEMORY_GIB), value=80,
                                              description="GiB/device"),
        "batch_size": widgets.IntSlider(value=1, min=1, max=16, description="batch/device"),
    }
    return dashboard(controls, explore)
