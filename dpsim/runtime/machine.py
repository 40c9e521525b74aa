"""This machine as dpsim hardware: its CUDA GPUs (via torch) or its CPU.

A GPU is identified by the name CUDA reports (`hardware.device_for_name`: a preset's
datasheet peaks, the real memory; an unknown name warns). Several GPUs are joined by NVLink
when the card is an SXM part (its name does not say PCIe) and every pair has peer access
(`torch.cuda.can_device_access_peer`); otherwise by the PCIe generation of the preset, and
`detect` says which it assumed in the cluster's name. NVSwitch in-switch reduction (NVLS)
is read from the driver's topology (`runtime.nvswitch`: an H100/H200/B200 SXM part with
every GPU pair at NV18 in `nvidia-smi topo -m`); when that cannot be read, `nvls` is False
and a warning says why.
"""

from __future__ import annotations

import warnings

import torch

from dpsim.runtime.nvswitch import detect_nvls, read_topology
from dpsim.sim import (
    NVLINK2,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    PCIE3_X16,
    PCIE4_X16,
    PCIE5_X16,
    SHARED_MEMORY,
    SPECS,
    Cluster,
    Device,
    Link,
    cpu_device,
    device_for_name,
    match_name,
)

NVLINK_BY_SPEC = {150.0: NVLINK2, 300.0: NVLINK3, 450.0: NVLINK4, 900.0: NVLINK5}
PCIE_BY_SPEC = {16.0: PCIE3_X16, 32.0: PCIE4_X16, 64.0: PCIE5_X16}


def gpu_device(index: int = 0) -> Device:
    """A Device for CUDA GPU `index`: the preset its name identifies, with its real memory
    (an unknown name warns and takes A100 80GB peaks)."""
    props = torch.cuda.get_device_properties(index)
    return device_for_name(props.name, int(props.total_memory))


def all_peers(n: int) -> bool:
    """Whether every pair of the first `n` CUDA devices can access each other's memory."""
    return all(torch.cuda.can_device_access_peer(a, b)
               for a in range(n) for b in range(n) if a != b)


def intra_link(cuda_name: str, peers: bool) -> tuple[Link, str]:
    """(the link between GPUs of this name, how it was decided)."""
    key = match_name(cuda_name)
    if key is None:
        warnings.warn(f"GPU {cuda_name!r} is unknown: assuming PCIe 4.0 between GPUs",
                      stacklevel=2)
        return PCIE4_X16, "assumed PCIe 4.0 (unknown GPU)"
    spec = SPECS[key]
    if spec.link_kind != "nvlink" or "pcie" in cuda_name.lower():  # incl. "A100-PCIE-40GB"
        if spec.link_kind == "nvlink":
            return (PCIE4_X16 if spec.link_GBps < 450 else PCIE5_X16), "PCIe (a PCIe card)"
        return PCIE_BY_SPEC.get(spec.link_GBps, PCIE4_X16), "PCIe"
    if peers:
        return NVLINK_BY_SPEC.get(spec.link_GBps, NVLINK4), "NVLink (peer access)"
    warnings.warn(f"{cuda_name}: an NVLink part without peer access between every pair; "
                  "assuming PCIe", stacklevel=2)
    return (PCIE4_X16 if spec.link_GBps < 450 else PCIE5_X16), "PCIe (no peer access)"


def detect() -> Cluster:
    """This machine as a one-node Cluster: its CUDA GPUs if any, else its CPU."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        n = torch.cuda.device_count()
        device = gpu_device(0)
        link, how = intra_link(device.name, n > 1 and all_peers(n))
        nvls = False
        if link.kind == "nvlink":
            nvls, _ = detect_nvls(device.name, n, read_topology())
        how += ", NVLS" if nvls else ""
        return Cluster(f"this machine ({n} GPU, {how})", device, n, 1, link, nvls=nvls)
    return Cluster("this machine (CPU)", cpu_device(), 1, 1, SHARED_MEMORY)
