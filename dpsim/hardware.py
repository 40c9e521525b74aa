"""Devices, links and clusters: frozen descriptions with units in the field names.

Peak numbers are vendor datasheet figures (dense, no sparsity). `efficiency` is the
fraction of peak a well-tuned training step reaches; `runtime.calibrate` measures it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from dpsim.validation import require_choice, require_finite, require_int, require_type

GiB = 1024**3

# Bounds of a description: wide enough for any real machine, tight enough that every time the
# simulator derives from them (a count of at most MAX_COUNT over a rate) stays finite.
MAX_MEMORY_GIB = 2**30  # memory_GiB: an exbibyte per device
MIN_RATE, MAX_RATE = 1e-6, 10**12  # TFLOP/s and GB/s: 1 MFLOP/s (1 kB/s) .. 1e24 FLOP/s (1 ZB/s)
MAX_OVERHEAD_US = 10**9  # op_overhead_us and latency_us: 1000 s per operator or message
MIN_EFFICIENCY = 1e-6  # fraction of peak reached; at most 1
MAX_DEVICES_PER_NODE, MAX_NODES = 1024, 4096
MAX_WORLD_SIZE = MAX_DEVICES_PER_NODE * MAX_NODES
MAX_CORES = 1 << 16  # cpu_device(n_cores)


@dataclass(frozen=True)
class Device:
    """One accelerator (or a CPU socket used as one)."""

    name: str
    kind: str  # "gpu" or "cpu"
    memory_GiB: float  # usable device memory
    fp32_tflops: float  # dense fp32 peak (TF32 off)
    bf16_tflops: float  # dense bf16/fp16 peak (tensor cores on GPUs)
    mem_bw_GBps: float  # device memory bandwidth, GB/s
    op_overhead_us: float = 10.0  # fixed cost per operator: Python dispatch + kernel launch
    efficiency: float = 0.6  # fraction of peak FLOP/s reached by large matmuls

    def __post_init__(self) -> None:
        require_type("name", self.name, str)
        require_choice("kind", self.kind, ("gpu", "cpu"))
        require_finite("memory_GiB", self.memory_GiB, 0, MAX_MEMORY_GIB, low_inclusive=False)
        require_finite("fp32_tflops", self.fp32_tflops, MIN_RATE, MAX_RATE)
        require_finite("bf16_tflops", self.bf16_tflops, MIN_RATE, MAX_RATE)
        require_finite("mem_bw_GBps", self.mem_bw_GBps, MIN_RATE, MAX_RATE)
        require_finite("op_overhead_us", self.op_overhead_us, 0, MAX_OVERHEAD_US)
        require_finite("efficiency", self.efficiency, MIN_EFFICIENCY, 1)

    @property
    def memory_bytes(self) -> int:
        """Usable memory in bytes."""
        return int(self.memory_GiB * GiB)

    def tflops(self, dtype: str) -> float:
        """Peak dense TFLOP/s for `dtype` ("fp32", "bf16" or "fp16")."""
        require_choice("dtype", dtype, ("fp32", "bf16", "fp16"))
        return self.fp32_tflops if dtype == "fp32" else self.bf16_tflops


@dataclass(frozen=True)
class Link:
    """A point-to-point link; bandwidth is per direction."""

    name: str
    bandwidth_GBps: float  # per direction, per device
    latency_us: float  # per message (alpha in the alpha-beta model)

    def __post_init__(self) -> None:
        require_type("name", self.name, str)
        require_finite("bandwidth_GBps", self.bandwidth_GBps, MIN_RATE, MAX_RATE)
        require_finite("latency_us", self.latency_us, 0, MAX_OVERHEAD_US)


@dataclass(frozen=True)
class Cluster:
    """`n_nodes` nodes of `devices_per_node` identical devices."""

    name: str
    device: Device
    devices_per_node: int
    n_nodes: int
    intra_node: Link  # between devices of one node (NVLink, PCIe, shared memory)
    inter_node: Link | None = None  # between nodes (InfiniBand, Ethernet); None for one node

    def __post_init__(self) -> None:
        require_type("name", self.name, str)
        require_type("device", self.device, Device)
        require_int("devices_per_node", self.devices_per_node, 1, MAX_DEVICES_PER_NODE)
        require_int("n_nodes", self.n_nodes, 1, MAX_NODES)
        require_type("intra_node", self.intra_node, Link)
        if self.inter_node is not None:
            require_type("inter_node", self.inter_node, Link)
        if self.n_nodes > 1 and self.inter_node is None:
            raise ValueError(
                f"inter_node=None with n_nodes={self.n_nodes}; give an inter-node Link"
            )

    @property
    def world_size(self) -> int:
        """Total number of devices."""
        return self.devices_per_node * self.n_nodes

    def link_for(self, n_devices: int) -> Link:
        """The slowest link a collective over the first `n_devices` devices crosses."""
        require_int("n_devices", n_devices, 1, self.world_size)
        if n_devices <= self.devices_per_node or self.inter_node is None:
            return self.intra_node
        return self.inter_node

    def with_devices(self, n_devices: int) -> Cluster:
        """The same kind of cluster resized to `n_devices` (filling nodes first)."""
        require_int("n_devices", n_devices, 1, self.devices_per_node * MAX_NODES)
        if n_devices <= self.devices_per_node:
            return replace(self, devices_per_node=n_devices, n_nodes=1)
        n_nodes = math.ceil(n_devices / self.devices_per_node)
        if n_devices % self.devices_per_node:
            raise ValueError(
                f"n_devices={n_devices} does not fill whole nodes of {self.devices_per_node}; "
                f"allowed: 1..{self.devices_per_node} or a multiple of {self.devices_per_node}"
            )
        inter = self.inter_node or INFINIBAND_NDR
        return replace(self, n_nodes=n_nodes, inter_node=inter)


# --- presets ------------------------------------------------------------------------------

A100_40GB = Device("A100 40GB SXM", "gpu", 40.0, 19.5, 312.0, 1555.0, op_overhead_us=6.0)
A100_80GB = Device("A100 80GB SXM", "gpu", 80.0, 19.5, 312.0, 2039.0, op_overhead_us=6.0)
H100_80GB = Device("H100 80GB SXM", "gpu", 80.0, 67.0, 989.0, 3350.0, op_overhead_us=5.0)
LAPTOP_CPU = Device("laptop CPU", "cpu", 16.0, 0.5, 0.5, 40.0, op_overhead_us=15.0)

NVLINK4 = Link("NVLink 4 (H100)", 450.0, 3.0)  # 900 GB/s bidirectional per GPU
NVLINK3 = Link("NVLink 3 (A100)", 300.0, 3.0)  # 600 GB/s bidirectional per GPU
PCIE4_X16 = Link("PCIe 4.0 x16", 25.0, 8.0)  # ~32 GB/s raw, ~25 GB/s achieved
INFINIBAND_NDR = Link("InfiniBand NDR 400 Gb/s", 50.0, 6.0)  # one NIC per GPU
SHARED_MEMORY = Link("shared memory (gloo on one host)", 5.0, 30.0)  # typical gloo on CPU

DEVICES: dict[str, Device] = {
    "a100-40gb": A100_40GB,
    "a100-80gb": A100_80GB,
    "h100-80gb": H100_80GB,
    "laptop-cpu": LAPTOP_CPU,
}


def _clusters() -> dict[str, Cluster]:
    node = Cluster("8x H100 NVLink node", H100_80GB, 8, 1, NVLINK4)
    return {
        "h100-node": node,
        "a100-node": Cluster("8x A100 80GB NVLink node", A100_80GB, 8, 1, NVLINK3),
        "h100-ib-4": replace(node, name="4 nodes of 8x H100, InfiniBand", n_nodes=4,
                             inter_node=INFINIBAND_NDR),
        "h100-ib-16": replace(node, name="16 nodes of 8x H100, InfiniBand", n_nodes=16,
                              inter_node=INFINIBAND_NDR),
        "h100-ib-128": replace(node, name="128 nodes of 8x H100, InfiniBand", n_nodes=128,
                               inter_node=INFINIBAND_NDR),
        "pcie-4gpu": Cluster("4x A100 40GB over PCIe", A100_40GB, 4, 1, PCIE4_X16),
    }


CLUSTERS: dict[str, Cluster] = _clusters()


def get_device(name: str) -> Device:
    """A device preset by name (see DEVICES), or "this-cpu" for this machine's CPU."""
    if name == "this-cpu":
        return cpu_device()
    require_choice("name", name, [*DEVICES, "this-cpu"])
    return DEVICES[name]


def get_cluster(name: str) -> Cluster:
    """A cluster preset by name (see CLUSTERS; `dpsim.runtime.machine.detect` for this one)."""
    require_choice("name", name, CLUSTERS)
    return CLUSTERS[name]


def cpu_device(n_cores: int | None = None) -> Device:
    """This machine's CPU with nominal (uncalibrated) throughput: ~50 GFLOP/s fp32 per core.

    `n_cores` (1..MAX_CORES) overrides the number of cores; None counts this machine's.
    """
    if n_cores is not None:
        require_int("n_cores", n_cores, 1, MAX_CORES)
    cores = n_cores or os.cpu_count() or 1
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    except (ValueError, OSError, AttributeError):
        mem = 8.0
    return Device(f"CPU ({cores} cores)", "cpu", round(mem, 1), 0.05 * cores, 0.05 * cores,
                  20.0, op_overhead_us=15.0)
