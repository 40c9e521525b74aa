"""Cluster presets: DGX nodes, cloud instances, a PCIe workstation, and the course's clusters.

Each node lists its devices, intra-node fabric, NICs and whether its NVSwitch reduces in
place (NVLS). Sources are the vendors' system pages, named beside each preset in SOURCES.
Every multi-node preset is rail-optimized (`Cluster.rail_optimized`, the DGX SuperPOD
cabling) except "h100-eth-4", an example of a cloud Ethernet fabric that is not.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from dpsim.sim.checks import OneOf
from dpsim.sim.hardware.cluster import Cluster
from dpsim.sim.hardware.device import (
    A100_40GB,
    A100_80GB,
    B200,
    H100_80GB,
    H200,
    RTX_4090,
    V100_32GB,
)
from dpsim.sim.hardware.link import (
    EFA_V1,
    EFA_V2,
    GCP_TCPX,
    GCP_TCPXO,
    INFINIBAND_EDR,
    INFINIBAND_HDR,
    INFINIBAND_NDR,
    NVLINK2,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    PCIE4_X16,
    ROCE_100G,
    ROCE_200G,
    ROCE_400G,
)

SOURCES: dict[str, str] = {
    "dgx-a100": "NVIDIA DGX A100 datasheet: 8x A100 80GB, 6 NVSwitches (600 GB/s per GPU), "
                "8x ConnectX-6 200 Gb/s InfiniBand for compute",
    "dgx-h100": "NVIDIA DGX H100 datasheet: 8x H100 SXM, 4 NVSwitches with NVLink SHARP "
                "(900 GB/s per GPU), 8x ConnectX-7 400 Gb/s InfiniBand/Ethernet for compute",
    "dgx-h200": "NVIDIA DGX H200 datasheet: 8x H200 141GB, 4 NVSwitches (900 GB/s per GPU), "
                "8x ConnectX-7 400 Gb/s for compute",
    "dgx-b200": "NVIDIA DGX B200 datasheet: 8x B200, 2 NVSwitches, NVLink 5 (1.8 TB/s per "
                "GPU), 8x ConnectX-7 400 Gb/s for compute",
    "p4de": "AWS EC2 P4 instances page: p4de.24xlarge, 8x A100 80GB, NVSwitch 600 GB/s, "
            "400 Gbps EFA (4 NICs)",
    "p4d": "AWS EC2 P4 instances page: p4d.24xlarge, 8x A100 40GB, NVSwitch 600 GB/s, "
           "400 Gbps EFA (4 NICs)",
    "p5": "AWS EC2 P5 instances page: p5.48xlarge, 8x H100 80GB, NVSwitch 900 GB/s, "
          "3,200 Gbps EFAv2 (32 NICs of 100 Gbps)",
    "oci-a100": "OCI compute shapes, BM.GPU.B4.8: 8x A100 40GB, 1,600 Gbps RDMA "
                "(16x 100 Gbps RoCE)",
    "oci-h100": "OCI compute shapes, BM.GPU.H100.8: 8x H100 80GB, 3,200 Gbps RDMA "
                "(16x 200 Gbps RoCE)",
    "a3-mega": "Google Cloud 'Networking and GPU machines': a3-megagpu-8g, 8x H100 80GB, up to "
               "1,600 Gbps GPU networking (8 GPU NICs of 200 Gb/s, GPUDirect-TCPXO; eth1..eth8 in "
               "GoogleCloudPlatform/cluster-toolkit examples/gke-a3-megagpu/nccl-test-latest.yaml)",
    "a3-high": "Google Cloud 'Networking and GPU machines': a3-highgpu-8g, 8x H100 80GB, up to "
               "1,000 Gbps (4 GPU NICs of 200 Gb/s with GPUDirect-TCPX plus a host NIC; eth1..eth4 "
               "in GoogleCloudPlatform/cluster-toolkit examples/gke-a3-highgpu/nccl-test.yaml)",
    "a3-ultra": "Google Cloud 'Networking and GPU machines': a3-ultragpu-8g, 8x H200, up to 3,600 "
                "Gbps (8 GPU NICs of 400 Gb/s RoCE, ConnectX-7, GPUDirect-RDMA, plus host NICs)",
    "a4": "Google Cloud 'Networking and GPU machines': a4-highgpu-8g, 8x B200, up to 3,600 Gbps "
          "(8 GPU NICs of 400 Gb/s RoCE, ConnectX-7, plus host NICs); dstackai/dstack "
          "mkdocs/docs/examples/clusters/gcp.md: 'A4 | B200:8 | 3.2 Tbps | RoCE'",
    "oci-h200": "OCI compute shapes, BM.GPU.H200.8: 8x H200 141GB, 3,200 Gbps RDMA (8x 400 Gbps "
                "RoCE; eight HCAs in oracle-quickstart/oci-hpc "
                "playbooks/roles/nccl-conf/templates/h200)",
    "gb200-nvl-8": "8 GPUs of a GB200 NVL72 rack (2 compute trays of 4), one NVLink 5 domain "
                   "with NVLink SHARP; as run in oracle-quickstart/oci-hpc-oke README",
    "dgx-1v": "NVIDIA DGX-1 with Tesla V100 datasheet: 8x V100 (16 or 32 GB), NVLink hybrid "
              "cube mesh (6 NVLink 2 links of 25 GB/s per direction per GPU), 4x 100 Gb/s "
              "InfiniBand EDR. Modelled as a switched NVLink 2 fabric at 150 GB/s per "
              "direction: NCCL's rings over 8 GPUs use all six links; for 2 or 4 GPUs of the "
              "mesh fewer links join them, which this preset does not model",
    "dgx-2": "NVIDIA DGX-2 datasheet: 16x V100 32GB, 12 NVSwitches (every GPU 6 NVLink 2 "
             "links, 300 GB/s bidirectional, to every other), 8x 100 Gb/s InfiniBand EDR",
    "h100-eth-4": "An example, not a vendor's system: 4 nodes of 8x H100 with 8x 200 Gb/s "
                  "RoCE each on a leaf-spine fabric that is not rail-optimized (a node's NICs "
                  "share a leaf), as general-purpose cloud Ethernet is often cabled",
    "rtx4090-workstation": "A 4x RTX 4090 workstation: PCIe 4.0 x16 per card, no NVLink "
                           "(NVIDIA Ada whitepaper; peer access disabled on GeForce)",
}


def _clusters() -> dict[str, Cluster]:
    node = Cluster("8x H100 NVLink node", H100_80GB, 8, 1, NVLINK4, nvls=True)
    dgx_a100 = Cluster("DGX A100 (8x A100 80GB, 8x HDR 200 Gb/s)", A100_80GB, 8, 1, NVLINK3,
                       INFINIBAND_HDR)
    dgx_h100 = Cluster("DGX H100 (8x H100, 8x NDR 400 Gb/s)", H100_80GB, 8, 1, NVLINK4,
                       INFINIBAND_NDR, nvls=True)
    return {
        "h100-node": node,
        "a100-node": Cluster("8x A100 80GB NVLink node", A100_80GB, 8, 1, NVLINK3),
        "h100-ib-4": replace(node, name="4 nodes of 8x H100, InfiniBand", n_nodes=4,
                             inter_node=INFINIBAND_NDR),
        "h100-ib-16": replace(node, name="16 nodes of 8x H100, InfiniBand", n_nodes=16,
                              inter_node=INFINIBAND_NDR),
        "h100-ib-128": replace(node, name="128 nodes of 8x H100, InfiniBand", n_nodes=128,
                               inter_node=INFINIBAND_NDR),
        "h100-eth-4": replace(node, name="4 nodes of 8x H100, RoCE, not rail-optimized",
                              n_nodes=4, inter_node=ROCE_200G, rail_optimized=False),
        "pcie-4gpu": Cluster("4x A100 40GB over PCIe", A100_40GB, 4, 1, PCIE4_X16),
        "dgx-a100": dgx_a100,
        "dgx-h100": dgx_h100,
        "dgx-h200": replace(dgx_h100, name="DGX H200 (8x H200, 8x NDR 400 Gb/s)", device=H200),
        "dgx-b200": Cluster("DGX B200 (8x B200, 8x 400 Gb/s)", B200, 8, 1, NVLINK5,
                            INFINIBAND_NDR, nvls=True),
        "p4de": Cluster("AWS p4de.24xlarge (8x A100 80GB, 4x 100 Gb/s EFA)", A100_80GB, 8, 1,
                        NVLINK3, EFA_V1, nics_per_node=4),
        "p4d": Cluster("AWS p4d.24xlarge (8x A100 40GB, 4x 100 Gb/s EFA)", A100_40GB, 8, 1,
                       NVLINK3, EFA_V1, nics_per_node=4),
        "p5": Cluster("AWS p5.48xlarge (8x H100, 32x 100 Gb/s EFA v2)", H100_80GB, 8, 1,
                      NVLINK4, EFA_V2, nics_per_node=32, nvls=True),
        "oci-a100": Cluster("OCI BM.GPU.B4.8 (8x A100 40GB, 16x 100 Gb/s RoCE)", A100_40GB, 8,
                            1, NVLINK3, ROCE_100G, nics_per_node=16),
        "oci-h100": Cluster("OCI BM.GPU.H100.8 (8x H100, 16x 200 Gb/s RoCE)", H100_80GB, 8, 1,
                            NVLINK4, ROCE_200G, nics_per_node=16, nvls=True),
        "a3-mega": Cluster("GCP a3-megagpu-8g (8x H100, 8x 200 Gb/s GPUDirect-TCPXO)", H100_80GB,
                           8, 1, NVLINK4, GCP_TCPXO, nics_per_node=8, nvls=True),
        "a3-high": Cluster("GCP a3-highgpu-8g (8x H100, 4x 200 Gb/s GPUDirect-TCPX)", H100_80GB,
                           8, 1, NVLINK4, GCP_TCPX, nics_per_node=4, nvls=True),
        "a3-ultra": Cluster("GCP a3-ultragpu-8g (8x H200, 8x 400 Gb/s RoCE)", H200, 8, 1,
                            NVLINK4, ROCE_400G, nvls=True),
        "a4": Cluster("GCP a4-highgpu-8g (8x B200, 8x 400 Gb/s RoCE)", B200, 8, 1, NVLINK5,
                      ROCE_400G, nvls=True),
        "oci-h200": Cluster("OCI BM.GPU.H200.8 (8x H200, 8x 400 Gb/s RoCE)", H200, 8, 1, NVLINK4,
                            ROCE_400G, nvls=True),
        "gb200-nvl-8": Cluster("8 GPUs of a GB200 NVL72 (one NVLink 5 domain)", B200, 8, 1,
                               NVLINK5, nvls=True),
        "dgx-1v": Cluster("DGX-1 (8x V100 32GB, NVLink hybrid cube mesh, 4x EDR 100 Gb/s)",
                          V100_32GB, 8, 1, NVLINK2, INFINIBAND_EDR, nics_per_node=4),
        "dgx-2": Cluster("DGX-2 (16x V100 32GB, NVSwitch, 8x EDR 100 Gb/s)", V100_32GB, 16, 1,
                         NVLINK2, INFINIBAND_EDR, nics_per_node=8),
        "rtx4090-workstation": Cluster("4x RTX 4090 workstation (PCIe 4.0)", RTX_4090, 4, 1,
                                       PCIE4_X16),
    }


CLUSTERS: dict[str, Cluster] = _clusters()


def get_cluster(name: Annotated[str, OneOf(lambda: CLUSTERS)]) -> Cluster:
    """A cluster preset by name (see CLUSTERS; `dpsim.runtime.machine.detect` for this one)."""
    return CLUSTERS[name]
