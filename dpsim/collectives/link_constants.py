"""The named constants of the collective model, each with where it comes from.

Three kinds of source: a maintainer's published statement (cited), a fit to the training
half of the published nccl-tests runs in `dpsim/fidelity/data/nccl_tests.json` (the held-out
half is the model's error, `python -m dpsim validate`), or an assumption, said as such.
The per-hop latencies of the links live on the link presets (`dpsim.hardware`), fitted the
same way where the dataset has that link.
"""

from __future__ import annotations

from typing import NamedTuple


class Constant(NamedTuple):
    """A value and its source."""

    value: float
    source: str


FIT = "fit on the training half of dpsim/fidelity/data/nccl_tests.json (python -m dpsim validate)"

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
    "roce": Constant(0.64, FIT),
    "efa": Constant(0.98, FIT),
    "ethernet": Constant(0.90, "assumed; no published point in the dataset"),
    "shared_memory": Constant(1.0, "gloo on one host: the preset is already measured-like"),
}

# NVLink SHARP (NVLS) all-reduce: algbw / per-direction NVLink spec. Each GPU sends its data
# to the switch once and reads the sum once. Published anchor: NVIDIA/nccl-tests issue
# #212, S. Jeaugey: 'On 8 GPUs, you should reach a peak busBw of ~480GB/s (algbw
# ~275GB/s)' on H100 (275/450 = 0.61); the value used is the fit.
NVLS_FRACTION = Constant(0.61, "NVIDIA/nccl-tests issue #212 (H100 statement above)")

# Per NVSwitch generation (by intra-node link preset name), fitted where the data has it.
NVLS_FRACTIONS: dict[str, Constant] = {
    "NVLink 4 (H100)": Constant(0.64, FIT),
    "NVLink 5 (B200)": Constant(0.66, FIT),
}

# One pass through an NVSwitch that reduces (NVLS), microseconds, per switch generation.
NVLS_HOP_US: dict[str, Constant] = {
    "NVLink 4 (H100)": Constant(25.86, FIT),
    "NVLink 5 (B200)": Constant(11.29, FIT),
}

# Fixed cost of one collective call (kernel launch, NCCL proxy start), microseconds.
LAUNCH_US = Constant(3.54, FIT)

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
