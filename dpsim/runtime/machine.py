"""This machine as dpsim hardware: its CUDA GPUs (via torch) or its CPU."""

from __future__ import annotations

from dataclasses import replace

import torch

from dpsim.hardware import (
    A100_80GB,
    DEVICES,
    PCIE4_X16,
    SHARED_MEMORY,
    Cluster,
    Device,
    GiB,
    cpu_device,
)


def gpu_device(index: int = 0) -> Device:
    """A Device for CUDA GPU `index`: a matching preset's peaks with the real memory size."""
    props = torch.cuda.get_device_properties(index)
    mem_gib = props.total_memory / GiB
    base = A100_80GB
    for key, preset in DEVICES.items():
        if preset.kind == "gpu" and key.split("-")[0] in props.name.lower():
            base = preset
    return replace(base, name=props.name, memory_GiB=round(mem_gib, 2))


def detect() -> Cluster:
    """This machine as a one-node Cluster: its CUDA GPUs if any, else its CPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        n = torch.cuda.device_count()
        return Cluster(f"this machine ({n} GPU)", gpu_device(0), n, 1, PCIE4_X16)
    return Cluster("this machine (CPU)", cpu_device(), 1, 1, SHARED_MEMORY)
