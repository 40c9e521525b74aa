"""FSDP units: consecutive workload layers wrapped as one unit, costed on one device.

A unit is what FSDP gathers, computes and frees at once; `fsdp.step.FSDPStep` schedules them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.sim.cost.compute import backward_time_s, forward_time_s
from dpsim.sim.hardware import Cluster
from dpsim.sim.strategies.fsdp.config import FSDPConfig
from dpsim.sim.workload import DTYPE_BYTES, Workload


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: its parameters and per-step costs on one device.

    A record `build_units` makes from a checked workload, cluster and config; it trusts them
    (a forward_s of inf from extreme rates is refused by `fsdp.simulate`, naming the cluster).
    """

    name: str
    n_params: int
    n_param_tensors: int
    forward_s: float
    backward_s: float
    activation_bytes: int  # kept for backward by this unit's layers (whole local batch)
    input_bytes: int  # the unit's input (kept alone under activation checkpointing)


def build_units(workload: Workload, cluster: Cluster, config: FSDPConfig) -> list[Unit]:
    """Group the workload's layers into units and cost each on the cluster's device."""
    b, dt, dev = config.batch_size, config.dtype, cluster.device
    scale = b * DTYPE_BYTES[dt] / DTYPE_BYTES[workload.dtype]
    units: list[Unit] = []
    prev_out = workload.input_bytes
    layers = workload.layers
    for i in range(0, len(layers), config.layers_per_unit):
        group = layers[i:i + config.layers_per_unit]
        name = group[0].name if len(group) == 1 else f"{group[0].name}..{group[-1].name}"
        units.append(Unit(
            name=name,
            n_params=sum(layer.n_params for layer in group),
            n_param_tensors=sum(layer.n_param_tensors for layer in group),
            forward_s=sum(forward_time_s(layer, b, dev, dt, workload.dtype) for layer in group),
            backward_s=sum(backward_time_s(layer, b, dev, dt, workload.dtype) for layer in group),
            activation_bytes=int(sum(layer.activation_bytes for layer in group) * scale),
            input_bytes=int(prev_out * scale),
        ))
        prev_out = group[-1].output_bytes
    return units
