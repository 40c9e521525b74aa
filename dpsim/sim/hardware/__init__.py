"""Hardware as plain data: devices, links and clusters, with units in the field names.

One module per concept: `device` (Device, device presets, `get_device`, `device_for_name`,
`cpu_device`), `link` (Link, link kinds and presets), `cluster` (Cluster), `presets` (the
cluster presets, `CLUSTERS`, `get_cluster`), `gpu_specs` (the datasheets) and `limits` (the
bounds of a description). This package re-exports their public names, so
`from dpsim.sim.hardware import Device, CLUSTERS` works; none of them imports the collective
model (`dpsim.sim.collectives.group_cost.group_link` gives the link a group of a cluster
sees).
"""

from __future__ import annotations

from dpsim.sim.hardware.cluster import Cluster
from dpsim.sim.hardware.device import (
    A10,
    A10G,
    A100_40GB,
    A100_80GB,
    B200,
    DEVICES,
    H100_80GB,
    H100_PCIE,
    H200,
    L4,
    LAPTOP_CPU,
    MI300X,
    RTX_3070,
    RTX_3080,
    RTX_3090,
    RTX_4080,
    RTX_4090,
    T4,
    V100_32GB,
    Device,
    cpu_device,
    device_for_name,
    get_device,
)
from dpsim.sim.hardware.link import (
    EFA_V1,
    EFA_V2,
    ETHERNET_10G,
    GCP_TCPX,
    GCP_TCPXO,
    INFINIBAND_EDR,
    INFINIBAND_HDR,
    INFINIBAND_NDR,
    INFINITY_FABRIC,
    LINK_KINDS,
    NETWORK_KINDS,
    NVLINK2,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    PCIE3_X16,
    PCIE4_X16,
    PCIE5_X16,
    ROCE_100G,
    ROCE_200G,
    ROCE_400G,
    SHARED_MEMORY,
    Link,
)
from dpsim.sim.hardware.presets import CLUSTERS, SOURCES, get_cluster
from dpsim.sim.limits import (
    MAX_CORES,
    MAX_DEVICES_PER_NODE,
    MAX_MEMORY_GIB,
    MAX_NICS_PER_NODE,
    MAX_NODES,
    MAX_OVERHEAD_US,
    MAX_RATE,
    MAX_WORLD_SIZE,
    MIN_EFFICIENCY,
    MIN_RATE,
    GiB,
)

__all__ = [
    "A10", "A10G", "A100_40GB", "A100_80GB", "B200", "CLUSTERS", "DEVICES", "EFA_V1", "EFA_V2",
    "ETHERNET_10G", "GCP_TCPX", "GCP_TCPXO", "H100_80GB", "H100_PCIE", "H200", "INFINIBAND_EDR",
    "INFINIBAND_HDR", "INFINIBAND_NDR", "INFINITY_FABRIC", "L4", "LAPTOP_CPU", "LINK_KINDS",
    "MAX_CORES", "MAX_DEVICES_PER_NODE", "MAX_MEMORY_GIB", "MAX_NICS_PER_NODE", "MAX_NODES",
    "MAX_OVERHEAD_US", "MAX_RATE", "MAX_WORLD_SIZE", "MI300X", "MIN_EFFICIENCY", "MIN_RATE",
    "NETWORK_KINDS", "NVLINK2", "NVLINK3", "NVLINK4", "NVLINK5", "PCIE3_X16", "PCIE4_X16",
    "PCIE5_X16", "ROCE_100G", "ROCE_200G", "ROCE_400G", "RTX_3070",
    "RTX_3080", "RTX_3090", "RTX_4080", "RTX_4090", "SHARED_MEMORY", "SOURCES",
    "T4", "V100_32GB", "Cluster", "Device", "GiB", "Link", "cpu_device", "device_for_name",
    "get_cluster", "get_device",
]
