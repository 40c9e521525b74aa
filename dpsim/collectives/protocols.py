"""NCCL's three protocols (LL, LL128, Simple): which an algorithm may use, and what each
costs relative to Simple, from NCCL's tuner (`link_constants.NCCL_TUNING`).

* LL: 8 bytes of data travel with 8 bytes of flags, so the receiver polls memory instead
  of waiting for a fence: the shortest hops, half the bandwidth (a tree's LL: 1/3.8).
* LL128: 120 of every 128 bytes are data (0.92 of Simple's bandwidth on a ring, 120/128 on
  a tree), hops between LL's and Simple's. NCCL enables it by default only where the GPUs
  talk over NVLink (`typeIntra <= PATH_NVB`, tuning.cc line 531); dpsim assumes the NICs are
  near enough to the GPUs (PCIe switch, as on DGX/HGX nodes) for NCCL's path test.
* Simple: whole buffers behind a memory fence: full bandwidth, the longest hops. NVLS and
  NVLSTree run Simple only (tuning.cc line 305).

A hop of protocol p costs the link's (Simple) hop latency x hwLatency[p] / hwLatency[Simple]
of NCCL's table for the link's class (NVLink, PCI, network) and the algorithm.
"""

from __future__ import annotations

from dpsim.collectives.link_constants import (
    BASE_LATENCY_US,
    HW_LATENCY_US,
    PROTOCOL_BANDWIDTH,
    PROTOCOLS,
)
from dpsim.hardware import Cluster, Link

PROTOCOL_CHOICES = ("auto", *PROTOCOLS)
NETWORK_CLASS_KINDS = ("infiniband", "roce", "efa", "ethernet")


def protocols_for(algorithm: str, cluster: Cluster) -> tuple[str, ...]:
    """The protocols NCCL runs `algorithm` with on `cluster` by default."""
    if algorithm == "nvls":
        return ("Simple",)
    if cluster.intra_node.kind == "nvlink":
        return PROTOCOLS
    return ("LL", "Simple")


def bandwidth_factor(algorithm: str, protocol: str) -> float:
    """The protocol's bandwidth / Simple's for `algorithm` (1 for Simple and NVLS)."""
    c = PROTOCOL_BANDWIDTH.get((algorithm, protocol))
    return 1.0 if c is None else c.value


def _hw_class(link: Link) -> str:
    if link.kind == "nvlink":
        return "nvlink"
    return "net" if link.kind in NETWORK_CLASS_KINDS else "pci"


def hop_ratio(link: Link, algorithm: str, protocol: str) -> float:
    """A hop of `protocol` on `link` / a Simple hop there (NCCL's hwLatencies ratio)."""
    if algorithm == "nvls" or protocol == "Simple":
        return 1.0
    hw = _hw_class(link)
    return HW_LATENCY_US[(hw, algorithm, protocol)].value / \
        HW_LATENCY_US[(hw, algorithm, "Simple")].value


def base_latency_s(algorithm: str, protocol: str) -> float:
    """NCCL's fixed latency of (`algorithm`, `protocol`), seconds."""
    return BASE_LATENCY_US[(algorithm, protocol)].value * 1e-6
