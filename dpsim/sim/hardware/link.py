"""Links: a point-to-point link (bandwidth per direction, latency per hop), its kinds and presets.

A `Link`'s bandwidth is the spec (line rate) unless its kind is "generic"; the collective
model (`dpsim.sim.collectives.nccl`) applies the achieved fraction of its kind
(`dpsim.sim.collectives.link_constants`); `dpsim.sim.collectives.group_cost.group_link` gives
the achieved link a process group sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import OneOf, check_fields
from dpsim.sim.limits import MAX_OVERHEAD_US, MAX_RATE, MIN_RATE, Microseconds, Rate

# What a link is; "generic" means its numbers are already what a collective achieves.
LINK_KINDS = ("generic", "nvlink", "pcie", "infinity_fabric", "infiniband", "roce", "efa",
              "ethernet", "shared_memory")
NETWORK_KINDS = ("generic", "infiniband", "roce", "efa", "ethernet", "shared_memory")


@dataclass(frozen=True)
class Link:
    """A point-to-point link; bandwidth is per direction."""

    name: str
    bandwidth_GBps: Rate  # per direction: per device (intra-node) or per NIC (network)
    latency_us: Microseconds  # per message, one hop (alpha in the alpha-beta model)
    kind: Annotated[str, OneOf(LINK_KINDS)] = "generic"  # one of LINK_KINDS; "generic" =
    # numbers already achieved

    def __post_init__(self) -> None:
        if (type(self.name) is str and type(self.bandwidth_GBps) in (int, float)
                and MIN_RATE <= self.bandwidth_GBps <= MAX_RATE
                and type(self.latency_us) in (int, float)
                and 0 <= self.latency_us <= MAX_OVERHEAD_US
                and type(self.kind) is str and self.kind in LINK_KINDS):
            return  # the common case (the collective model builds achieved links)
        check_fields(self)


# --- presets ------------------------------------------------------------------------------

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
