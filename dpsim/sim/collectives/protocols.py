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

The latency of a pair is NCCL's own formula (`nccl_latency_us`): its base latency plus its
per-hop latencies (hwLatencies) for the link class (NVLink, PCI, network) times the steps
of the algorithm, plus the network's own latency per network step.
"""

from __future__ import annotations

import math

from dpsim.sim.collectives.link_constants import (
    BASE_LATENCY_US,
    HW_LATENCY_US,
    NET_OVERHEAD_US,
    PROTOCOL_BANDWIDTH,
    PROTOCOLS,
    TREE_CORRECTION,
)
from dpsim.sim.hardware import Cluster, Link

PROTOCOL_CHOICES = ("auto", *PROTOCOLS)


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


def _hw(link: Link, network: bool) -> str:
    """NCCL's link class of `link`: NVLink, a network, or PCI (anything else)."""
    if network:
        return "net"
    return "nvlink" if link.kind == "nvlink" else "pci"


def _lat(hw: str, algorithm: str, protocol: str) -> float:
    return HW_LATENCY_US[(hw, algorithm, protocol)].value


def nccl_latency_us(collective: str, cluster: Cluster, n_nodes: int, ranks_per_node: int,
                    algorithm: str, protocol: str, net_us: float) -> float:  # long: NCCL's
    """NCCL's latency of (`algorithm`, `protocol`) in microseconds (tuning.cc lines
    384-431), with `net_us` the network's own latency (latencyInter) per network step.
    dpsim's "tree" with Simple on an NVLS node is NCCL's NVLSTree."""
    n, m = n_nodes * ranks_per_node, n_nodes
    nvls_tree = algorithm == "tree" and protocol == "Simple" and cluster.nvls \
        and ranks_per_node > 1
    algo = "nvls_tree" if nvls_tree else algorithm
    base = 0.0 if algo.startswith("nvls") else BASE_LATENCY_US[(algorithm, protocol)].value
    intra = _lat(_hw(cluster.intra_node, False), algo, protocol) if algo != "nvls" or \
        cluster.intra_node.kind == "nvlink" else 0.0
    if algo == "nvls":
        return intra
    inter_algo = "tree" if ranks_per_node == 1 and algo != "nvls_tree" else algo
    inter = _lat("net", inter_algo, protocol) + net_us * (2 if protocol == "Simple" else 1)
    log2m = int(math.log2(m))
    if algo == "nvls_tree":
        return intra + 2 * log2m * inter
    if algo == "tree":
        return base + 2 * ((ranks_per_node - 1) * intra + log2m * inter)
    steps = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1}
    if collective not in steps:  # broadcast, reduce: one step a rank, Simple at tree's
        hw = _hw(cluster.intra_node, m > 1)
        return base + n * _lat(hw, "tree" if protocol == "Simple" else "ring", protocol)
    if m > 1:
        overhead = NET_OVERHEAD_US.value * (3 if protocol == "Simple" else 1)
        intra = max(intra, overhead)
    inter_steps = 0 if m == 1 else 2 * (m - 1) if collective == "all_reduce" else m - 1
    return base + (steps[collective] - inter_steps) * intra + inter_steps * inter


def tree_correction(collective: str, algorithm: str, protocol: str, nbytes: int,
                    nvls_node: bool) -> float:
    """NCCL's correction of a tree all-reduce's bandwidth at `nbytes` (1: none); NCCL's
    NVLSTree (a tree with Simple on an NVLS node) gets none (tuning.cc lines 640-646)."""
    if collective != "all_reduce" or algorithm != "tree" or (nvls_node and protocol == "Simple"):
        return 1.0
    log_size = (nbytes >> 6).bit_length() - 1
    return TREE_CORRECTION[protocol][log_size] if 0 <= log_size < 23 else 1.0
