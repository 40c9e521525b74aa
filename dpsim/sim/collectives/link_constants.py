"""The named constants of the collective model, each with where it comes from.

Four kinds of source: NCCL's own tuner (src/graph/tuning.cc, file, commit and line), a
maintainer's published statement (cited), a fit to the training half of the published
nccl-tests runs in `dpsim/sim/fidelity/data/nccl_tests*.json` (the held-out half is the model's
error, `python -m dpsim validate`), or an assumption, said as such. A fitted rate of a link
absorbs what the model leaves out (channel counts, plugins, run-to-run differences): it is
not a measured per-NIC rate.
"""

from __future__ import annotations

from typing import NamedTuple


class Constant(NamedTuple):
    """A value and its source."""

    value: float
    source: str


FIT = ("fit on the training half of dpsim/sim/fidelity/data/nccl_tests*.json "
       "(python -m dpsim validate)")

# Achieved bandwidth / spec bandwidth, per link kind ("generic" links are already achieved).
ACHIEVED_FRACTION: dict[str, Constant] = {
    "generic": Constant(1.0, "a generic link's numbers are taken as achieved"),
    "nvlink": Constant(0.82, "NVIDIA/nccl-tests issue #212, S. Jeaugey (NCCL maintainer): "
                             "'450GB/s is the line rate. With the protocol overhead (~20%) "
                             "NCCL can get an effective NVLink bandwidth of 370GB/s'"),
    "infinity_fabric": Constant(0.82, "assumed equal to NVLink's; no published point here"),
    "pcie": Constant(0.80, "assumed (PCIe TLP and protocol overhead ~20%); no published "
                           "point in the dataset"),
    "infiniband": Constant(0.94, "NVIDIA/nccl-tests issue #290, D. Addison (NVIDIA): 'For "
                                 "NDR @ 400Gbps you should see 46-48GB/s per NIC' (47/50)"),
    "roce": Constant(0.64, "an earlier fit of this kind; used only for RoCE links not in "
                           "LINK_FRACTION"),
    "efa": Constant(0.98, "an earlier fit of this kind; used only for EFA links not in "
                          "LINK_FRACTION"),
    "ethernet": Constant(0.90, "assumed; no published point in the dataset"),
    "shared_memory": Constant(1.0, "gloo on one host: the preset is already measured-like"),
}

# NVLink SHARP (NVLS) all-reduce: algbw / per-direction NVLink spec. Each GPU sends its data
# to the switch once and reads the sum once. Published anchor: NVIDIA/nccl-tests issue
# #212, S. Jeaugey: 'On 8 GPUs, you should reach a peak busBw of ~480GB/s (algbw
# ~275GB/s)' on H100 (275/450 = 0.61); the value used is the fit.
NVLS_FRACTION = Constant(0.61, "NVIDIA/nccl-tests issue #212 (H100 statement above)")





# NCCL's three protocols, from NCCL's tuner (NVIDIA/nccl src/graph/tuning.cc). LL sends 8
# bytes of data with 8 bytes of flags (half the bandwidth, no fence: lowest latency); LL128
# 120 of every 128 bytes; Simple whole buffers behind a fence (full bandwidth, most latency).
NCCL_TUNING = ("NVIDIA/nccl src/graph/tuning.cc at commit "
               "5067397c2676d5aed50042fc39e5c8ee96eb0027")
PROTOCOLS = ("LL", "LL128", "Simple")

# Bandwidth of a protocol / Simple's, per algorithm (NCCL's "model refinements").
PROTOCOL_BANDWIDTH: dict[tuple[str, str], Constant] = {
    ("ring", "LL"): Constant(0.5, f"{NCCL_TUNING}, line 327: busBw * .5"),
    ("ring", "LL128"): Constant(0.92, f"{NCCL_TUNING}, line 329: busBw * 0.92"),
    ("tree", "LL"): Constant(1 / 3.8, f"{NCCL_TUNING}, line 332: busBw * 1.0 / 3.8"),
    ("tree", "LL128"): Constant(120 / 128, f"{NCCL_TUNING}, line 335: 120.0 / 128.0 "
                                            "(more than one node)"),
}

# Fixed latency of an (algorithm, protocol) in microseconds (NCCL's baseLatencies; NVLS 0).
BASE_LATENCY_US: dict[tuple[str, str], Constant] = {
    (a, p): Constant(v, f"{NCCL_TUNING}, line {line}: baseLatencies")
    for a, line, row in (("tree", 151, (6.8, 14.0, 8.4)), ("ring", 151, (6.6, 14.0, 8.4)),
                         ("nvls", 153, (0.0, 0.0, 0.0)))
    for p, v in zip(PROTOCOLS, row, strict=True)}

# NCCL's per-hop latencies (hwLatencies, us) per link class x algorithm x protocol; NVLS
# and NVLSTree run Simple only. dpsim's latency of a pair is NCCL's formula over these
# (`protocols.nccl_latency_us`) plus the network's own latency (fitted, HOP_LATENCY_US).
HW_LATENCY_US: dict[tuple[str, str, str], Constant] = {
    **{(hw, a, p): Constant(v, f"{NCCL_TUNING}, line {line}: hwLatencies")
       for hw, line, rows in (("nvlink", 159, {"tree": (0.6, 1.25, 4.0),
                                               "ring": (0.6, 1.9, 3.4)}),
                              ("pci", 165, {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)}),
                              ("net", 171, {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)}))
       for a, row in rows.items() for p, v in zip(PROTOCOLS, row, strict=True)},
    ("nvlink", "nvls", "Simple"): Constant(25.0, f"{NCCL_TUNING}, line 161: hwLatencies NVLS"),
    ("nvlink", "nvls_tree", "Simple"): Constant(25.0, f"{NCCL_TUNING}, line 161: NVLSTree"),
    ("net", "nvls_tree", "Simple"): Constant(20.9, f"{NCCL_TUNING}, line 173: NVLSTree"),
}

# NCCL's tree correction: a tree all-reduce's bandwidth x this factor at sizes 64 B x 2**i
# (i = 0..22, floor(log2(bytes / 64))), per protocol: "Trees are not perfectly sticking to
# the model for medium sizes" (applied for i < 23 at line 641).
TREE_CORRECTION_SOURCE = f"{NCCL_TUNING}, lines 623-627: treeCorrectionFactor"
TREE_CORRECTION: dict[str, tuple[float, ...]] = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9, .9),
}

# Per network step of a ring across nodes, NCCL charges at least this (x3 for Simple).
NET_OVERHEAD_US = Constant(1.0, f"{NCCL_TUNING}, lines 226-233: getNetOverhead, 1.0 on Intel "
                                "x86 and others, 2.0 on AMD; dpsim does not model the CPU and "
                                "assumes 1.0")

# The fitted constants below are what `python -m dpsim validate` fits (its results say
# whether they still are: shipped_constants_match_fit); `python -m dpsim validate
# --write-constants` rewrites the block. Keys: link preset names.
# Achieved / spec bandwidth of a network link whose runs the data has; other links: their
# kind's ACHIEVED_FRACTION.
# LL's rate across nodes, GB/s per node: NCCL caps LL at llMaxBw with more than one node
# (tuning.cc lines 272, 327, 332: 39 GB/s busBw on two Intel nodes, 22.5 on AMD); what LL
# reaches over each network is fitted; networks not here: no cap.
# NVLS: algbw / per-direction NVLink spec.
# A network's own latency (us), NCCL's graph latencyInter: added to each network step of
# NCCL's formula (twice with Simple, NCCL's flush); networks not here use their preset's
# `latency_us`.
# Fixed cost of one collective call (kernel launch, NCCL proxy start), microseconds.
# The fill term of each bottleneck link (`params`: FILL_US x S / (S + FILL_BYTES)), us and
# bytes; links not here: none.
# fitted: begin
LINK_FRACTION: dict[str, Constant] = {
    "EFA 100 Gb/s (p4d/p4de)": Constant(0.84, FIT),
    "EFA v2 100 Gb/s (p5)": Constant(0.6, FIT),
    "GPUDirect-TCPX 200 Gb/s (GCP A3 High)": Constant(0.94, FIT),
    "GPUDirect-TCPXO 200 Gb/s (GCP A3 Mega)": Constant(0.94, FIT),
    "InfiniBand HDR 200 Gb/s": Constant(0.64, FIT),
    "InfiniBand NDR 400 Gb/s": Constant(0.7, FIT),
    "RoCE 100 Gb/s": Constant(0.5, FIT),
    "RoCE 200 Gb/s": Constant(0.64, FIT),
    "RoCE 400 Gb/s": Constant(0.82, FIT),
}
LL_NETWORK_GBPS: dict[str, Constant] = {
    "EFA 100 Gb/s (p4d/p4de)": Constant(2.0, FIT),
    "EFA v2 100 Gb/s (p5)": Constant(1.587, FIT),
    "GPUDirect-TCPX 200 Gb/s (GCP A3 High)": Constant(0.25, FIT),
    "GPUDirect-TCPXO 200 Gb/s (GCP A3 Mega)": Constant(5.04, FIT),
    "InfiniBand HDR 200 Gb/s": Constant(0.397, FIT),
    "InfiniBand NDR 400 Gb/s": Constant(40.317, FIT),
    "RoCE 100 Gb/s": Constant(4.0, FIT),
    "RoCE 200 Gb/s": Constant(0.25, FIT),
    "RoCE 400 Gb/s": Constant(50.797, FIT),
}
NVLS_FRACTIONS: dict[str, Constant] = {
    "NVLink 4 (H100)": Constant(0.56, FIT),
    "NVLink 5 (B200)": Constant(0.36, FIT),
}
HOP_LATENCY_US: dict[str, Constant] = {
    "EFA 100 Gb/s (p4d/p4de)": Constant(69.88, FIT),
    "EFA v2 100 Gb/s (p5)": Constant(21.91, FIT),
    "GPUDirect-TCPX 200 Gb/s (GCP A3 High)": Constant(160.0, FIT),
    "GPUDirect-TCPXO 200 Gb/s (GCP A3 Mega)": Constant(50.17, FIT),
    "InfiniBand HDR 200 Gb/s": Constant(4.93, FIT),
    "InfiniBand NDR 400 Gb/s": Constant(1.31, FIT),
    "RoCE 100 Gb/s": Constant(4.93, FIT),
    "RoCE 200 Gb/s": Constant(36.02, FIT),
    "RoCE 400 Gb/s": Constant(8.11, FIT),
}
LAUNCH_US = Constant(3.54, FIT)
FILL_US: dict[str, Constant] = {
    "EFA 100 Gb/s (p4d/p4de)": Constant(512.0, FIT),
    "EFA v2 100 Gb/s (p5)": Constant(161.27, FIT),
    "GPUDirect-TCPX 200 Gb/s (GCP A3 High)": Constant(512.0, FIT),
    "GPUDirect-TCPXO 200 Gb/s (GCP A3 Mega)": Constant(25.4, FIT),
    "InfiniBand HDR 200 Gb/s": Constant(64.0, FIT),
    "InfiniBand NDR 400 Gb/s": Constant(161.27, FIT),
    "NVLink 3 (A100)": Constant(406.37, FIT),
    "NVLink 4 (H100)": Constant(50.8, FIT),
    "NVLink 5 (B200)": Constant(12.7, FIT),
    "RoCE 100 Gb/s": Constant(80.63, FIT),
    "RoCE 200 Gb/s": Constant(4.0, FIT),
    "RoCE 400 Gb/s": Constant(16.0, FIT),
}
FILL_BYTES: dict[str, Constant] = {
    "EFA 100 Gb/s (p4d/p4de)": Constant(4194304.0, FIT),
    "EFA v2 100 Gb/s (p5)": Constant(8388608.0, FIT),
    "GPUDirect-TCPX 200 Gb/s (GCP A3 High)": Constant(65536.0, FIT),
    "GPUDirect-TCPXO 200 Gb/s (GCP A3 Mega)": Constant(131072.0, FIT),
    "InfiniBand HDR 200 Gb/s": Constant(131072.0, FIT),
    "InfiniBand NDR 400 Gb/s": Constant(16777216.0, FIT),
    "NVLink 3 (A100)": Constant(268435456.0, FIT),
    "NVLink 4 (H100)": Constant(16777216.0, FIT),
    "NVLink 5 (B200)": Constant(65536.0, FIT),
    "RoCE 100 Gb/s": Constant(134217728.0, FIT),
    "RoCE 200 Gb/s": Constant(134217728.0, FIT),
    "RoCE 400 Gb/s": Constant(2097152.0, FIT),
}
# fitted: end

# --- the fabric between nodes: rail-optimized or not --------------------------------------
# Rail-optimized (NVIDIA DGX SuperPOD reference architectures): NIC i of every node is cabled
# to the leaf switch of rail i, so a ring's inter-node hop (GPU i to GPU i of the next node)
# crosses one leaf switch. Otherwise a node's NICs share a leaf and a hop to a node on
# another leaf goes leaf -> spine -> leaf: two switch traversals more. The model sends every
# inter-node hop of a fabric that is not rail-optimized over the spine (the worst case).
SPINE_EXTRA_SWITCH_HOPS = Constant(2.0, "by the topology's definition (leaf-spine-leaf "
                                        "instead of one leaf); every hop crossing the spine "
                                        "is an assumption (the worst case)")
SWITCH_HOP_US = Constant(0.5, "assumption: one switch traversal of an InfiniBand NDR / "
                              "400G Ethernet fabric, taken as 0.5 us (vendors and resellers "
                              "quote sub-microsecond port-to-port latencies; no datasheet "
                              "number was found to cite)")
# No bandwidth penalty: a non-blocking fat tree gives full bisection bandwidth; what
# crossing the spine costs in bandwidth in practice (ECMP hash collisions) has no published
# number here, so it is left out rather than invented.
