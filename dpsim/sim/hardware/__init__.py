"""Devices, links and clusters: frozen descriptions with units in the field names.

Peak numbers are vendor datasheet figures (dense, no sparsity), each sourced in
`dpsim.sim.hardware.gpu_specs`. `efficiency` is the fraction of peak a well-tuned training step
reaches;
`runtime.calibrate` measures it. A `Link`'s bandwidth is the spec (line rate) unless its
kind is "generic"; the collective model (`dpsim.sim.collectives.nccl`) applies the achieved
fraction of its kind (`dpsim.sim.collectives.link_constants`). Cluster presets live in
`dpsim.sim.hardware.presets`.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, replace

from dpsim.sim.hardware.gpu_specs import SPECS, match_name
from dpsim.sim.validation import (
    require_bool,
    require_choice,
    require_finite,
    require_int,
    require_type,
)

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
MAX_NICS_PER_NODE = 1024
# What a link is; "generic" means its numbers are already what a collective achieves.
LINK_KINDS = ("generic", "nvlink", "pcie", "infinity_fabric", "infiniband", "roce", "efa",
              "ethernet", "shared_memory")
NETWORK_KINDS = ("generic", "infiniband", "roce", "efa", "ethernet", "shared_memory")


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
    bandwidth_GBps: float  # per direction: per device (intra-node) or per NIC (network)
    latency_us: float  # per message, one hop (alpha in the alpha-beta model)
    kind: str = "generic"  # one of LINK_KINDS; "generic" = numbers already achieved

    def __post_init__(self) -> None:
        require_type("name", self.name, str)
        require_finite("bandwidth_GBps", self.bandwidth_GBps, MIN_RATE, MAX_RATE)
        require_finite("latency_us", self.latency_us, 0, MAX_OVERHEAD_US)
        require_choice("kind", self.kind, LINK_KINDS)


@dataclass(frozen=True)
class Cluster:
    """`n_nodes` nodes of `devices_per_node` identical devices.

    A node is its devices, an intra-node fabric (`intra_node`: NVLink/NVSwitch, PCIe;
    `nvls`: the switch reduces in place, NVLink SHARP) and `nics_per_node` NICs of
    `inter_node` each (0: one per device, as on DGX and HGX nodes). `rail_optimized`: NIC i
    of every node is cabled to the same leaf switch (rail i), as in NVIDIA's DGX SuperPOD
    designs, so a ring's inter-node hop crosses one switch; False: nodes hang on shared
    leaves and hops cross the spine (`dpsim.sim.collectives.group_cost.fabric_cluster`).
    """

    name: str
    device: Device
    devices_per_node: int
    n_nodes: int
    intra_node: Link  # between devices of one node (NVLink, PCIe, shared memory)
    inter_node: Link | None = None  # one NIC (InfiniBand, RoCE, EFA, Ethernet); None: one node
    nics_per_node: int = 0  # NICs of `inter_node` per node; 0 = one per device
    nvls: bool = False  # in-switch reduction (NVLink SHARP, H100/H200/B200 NVSwitch)
    rail_optimized: bool = True  # NIC i of every node on leaf switch i (see above)

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
        require_int("nics_per_node", self.nics_per_node, 0, MAX_NICS_PER_NODE)
        require_bool("nvls", self.nvls)
        require_bool("rail_optimized", self.rail_optimized)

    @property
    def nics(self) -> int:
        """NICs per node (`nics_per_node`, or one per device when it is 0)."""
        return self.nics_per_node or self.devices_per_node

    @property
    def world_size(self) -> int:
        """Total number of devices."""
        return self.devices_per_node * self.n_nodes

    def link_for(self, n_devices: int) -> Link:
        """The achieved per-rank link of a ring over the first `n_devices` devices.

        One node: the intra-node link at its achieved fraction. Across nodes, NCCL runs one
        ring per NIC, so a rank's share is min(intra, all the node's NICs); the latency is
        the slowest hop's. See `dpsim.sim.collectives.nccl.ring_link`; for any process group and
        a fabric that is not rail-optimized, `dpsim.sim.collectives.group_cost.group_link`.
        """
        require_int("n_devices", n_devices, 1, self.world_size)
        from dpsim.sim.collectives.nccl import ring_link  # the model imports this module

        return ring_link(self, n_devices)

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


def _device(key: str, op_overhead_us: float = 5.0) -> Device:
    spec = SPECS[key]
    return Device(spec.label, "gpu", spec.memory_GiB, spec.fp32_tflops, spec.bf16_tflops,
                  spec.mem_bw_GBps, op_overhead_us=op_overhead_us)


A100_40GB = _device("a100-40gb", op_overhead_us=6.0)
A100_80GB = _device("a100-80gb", op_overhead_us=6.0)
H100_80GB = _device("h100-80gb")
H100_PCIE = _device("h100-pcie")
H200 = _device("h200")
B200 = _device("b200")
L4 = _device("l4")
T4 = _device("t4", op_overhead_us=8.0)
A10 = _device("a10")
RTX_4090 = _device("rtx-4090")
V100_32GB = _device("v100-32gb", op_overhead_us=8.0)
MI300X = _device("mi300x")
LAPTOP_CPU = Device("laptop CPU", "cpu", 16.0, 0.5, 0.5, 40.0, op_overhead_us=15.0)

# Spec bandwidths per direction; latencies are the per-hop alphas of dpsim.sim.collectives.nccl,
# fitted (python -m dpsim validate) where the dataset has that link: NVLink 3, EFA v1/v2,
# RoCE 100G; NVLink 4/5's ring hop is tied to NVLink 3's (the NVLS pass of their switches is
# fitted apart). Assumed: NVLink 2 and Infinity Fabric as NVLink 3; InfiniBand and RoCE
# 200G as RoCE 100G; PCIe,
# Ethernet and shared memory keep the course's earlier values.
NVLINK2 = Link("NVLink 2 (V100)", 150.0, 1.55, "nvlink")  # 300 GB/s total per GPU
NVLINK3 = Link("NVLink 3 (A100)", 300.0, 1.55, "nvlink")  # 600 GB/s bidirectional per GPU
NVLINK4 = Link("NVLink 4 (H100)", 450.0, 1.55, "nvlink")  # 900 GB/s bidirectional per GPU
NVLINK5 = Link("NVLink 5 (B200)", 900.0, 1.55, "nvlink")  # 1.8 TB/s bidirectional per GPU
INFINITY_FABRIC = Link("Infinity Fabric (MI300X)", 448.0, 1.55, "infinity_fabric")
PCIE3_X16 = Link("PCIe 3.0 x16", 15.75, 8.0, "pcie")  # 8 GT/s x 16 lanes, 128b/130b
PCIE4_X16 = Link("PCIe 4.0 x16", 31.5, 8.0, "pcie")  # 16 GT/s x 16 lanes
PCIE5_X16 = Link("PCIe 5.0 x16", 63.0, 8.0, "pcie")  # 32 GT/s x 16 lanes
INFINIBAND_EDR = Link("InfiniBand EDR 100 Gb/s", 12.5, 5.82, "infiniband")
INFINIBAND_HDR = Link("InfiniBand HDR 200 Gb/s", 25.0, 5.82, "infiniband")
INFINIBAND_NDR = Link("InfiniBand NDR 400 Gb/s", 50.0, 5.82, "infiniband")  # one NIC per GPU
ROCE_100G = Link("RoCE 100 Gb/s", 12.5, 5.82, "roce")
ROCE_200G = Link("RoCE 200 Gb/s", 25.0, 5.82, "roce")
ROCE_400G = Link("RoCE 400 Gb/s", 50.0, 5.82, "roce")  # latency assumed as RoCE 100G
# Google Cloud A3 GPU NICs (200 Gb/s each); latency assumed as RoCE 100G until a fit has them.
GCP_TCPX = Link("GPUDirect-TCPX 200 Gb/s (GCP A3 High)", 25.0, 5.82, "ethernet")
GCP_TCPXO = Link("GPUDirect-TCPXO 200 Gb/s (GCP A3 Mega)", 25.0, 5.82, "ethernet")
EFA_V1 = Link("EFA 100 Gb/s (p4d/p4de)", 12.5, 69.88, "efa")
EFA_V2 = Link("EFA v2 100 Gb/s (p5)", 12.5, 8.11, "efa")
ETHERNET_10G = Link("Ethernet 10 Gb/s", 1.25, 50.0, "ethernet")
SHARED_MEMORY = Link("shared memory (gloo on one host)", 5.0, 30.0)  # typical gloo on CPU

DEVICES: dict[str, Device] = {
    "a100-40gb": A100_40GB,
    "a100-80gb": A100_80GB,
    "h100-80gb": H100_80GB,
    "h100-pcie": H100_PCIE,
    "h200": H200,
    "b200": B200,
    "l4": L4,
    "t4": T4,
    "a10": A10,
    "rtx-4090": RTX_4090,
    "v100-32gb": V100_32GB,
    "mi300x": MI300X,
    "laptop-cpu": LAPTOP_CPU,
}


def __getattr__(name: str) -> dict[str, Cluster]:
    """`CLUSTERS`, built on first use by `dpsim.sim.hardware.presets` from the presets above."""
    if name == "CLUSTERS":
        from dpsim.sim.hardware.presets import CLUSTERS

        return CLUSTERS
    raise AttributeError(f"module 'dpsim.sim.hardware' has no attribute {name!r}")


def get_device(name: str) -> Device:
    """A device preset by name (see DEVICES), or "this-cpu" for this machine's CPU."""
    if name == "this-cpu":
        return cpu_device()
    require_choice("name", name, [*DEVICES, "this-cpu"])
    return DEVICES[name]


def get_cluster(name: str) -> Cluster:
    """A cluster preset by name (see CLUSTERS; `dpsim.runtime.machine.detect` for this one)."""
    from dpsim.sim.hardware.presets import CLUSTERS

    require_choice("name", name, CLUSTERS)
    return CLUSTERS[name]


def device_for_name(cuda_name: str, memory_bytes: int, warn: bool = True) -> Device:
    """The preset a CUDA device name identifies (`gpu_specs.match_name`), with the real
    memory size. An unknown name gets A100 80GB peaks and a warning, never silently; so
    does a name whose preset is a stand-in (an A10G takes the A10's datasheet)."""
    require_type("cuda_name", cuda_name, str)
    require_int("memory_bytes", memory_bytes, 1, int(MAX_MEMORY_GIB * GiB))
    require_bool("warn", warn)
    key = match_name(cuda_name)
    memory = round(memory_bytes / GiB, 2)
    if key is None:
        if warn:
            warnings.warn(f"GPU {cuda_name!r} is not among dpsim's presets ({', '.join(SPECS)}"
                          "); its peaks are taken from the A100 80GB SXM: give a Device for "
                          "better numbers", stacklevel=2)
        return replace(A100_80GB, name=cuda_name, memory_GiB=memory)
    preset = DEVICES[key]
    if warn and "a10g" in cuda_name.lower():
        warnings.warn(f"GPU {cuda_name!r}: {SPECS[key].note}", stacklevel=2)
    return replace(preset, name=cuda_name, memory_GiB=memory)


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
