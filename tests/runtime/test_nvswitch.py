"""NVLS detection from the driver's topology, on faked `nvidia-smi topo -m` output (no GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dpsim.runtime import machine, nvswitch
from dpsim.runtime.nvswitch import detect_nvls, gpu_links, nvls_support
from dpsim.sim.hardware import NVLINK4, PCIE5_X16

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo(cells: list[list[str]]) -> str:
    """`nvidia-smi topo -m` text for a GPU matrix (plus one NIC column, as on DGX)."""
    n = len(cells)
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tNIC0\tCPU Affinity\tNUMA Affinity"
    rows = [f"GPU{i}\t" + "\t".join(row) + "\tPXB\t0-55\t0" for i, row in enumerate(cells)]
    return "\n".join([head, *rows]) + "\n" + LEGEND


def full(n: int, cell: str) -> str:
    return topo([["X" if a == b else cell for b in range(n)] for a in range(n)])


DGX_H100 = full(8, "NV18")
HGX_A100 = full(8, "NV12")
HGX_H100_4GPU = full(4, "NV6")  # the 4-GPU board: GPUs joined directly, no NVSwitch
H100_NVL_PAIRS = topo([["X", "NV12", "SYS", "SYS"], ["NV12", "X", "SYS", "SYS"],
                       ["SYS", "SYS", "X", "NV12"], ["SYS", "SYS", "NV12", "X"]])


def test_the_matrix_is_read_cell_by_cell() -> None:
    cells = gpu_links(H100_NVL_PAIRS)
    assert cells[(0, 1)] == "NV12"
    assert cells[(0, 2)] == "SYS"
    assert cells[(3, 3)] == "X"
    assert len(cells) == 16
    assert gpu_links("No devices were found") == {}


@pytest.mark.parametrize(("name", "n", "text", "present", "why"), [
    ("NVIDIA H100 80GB HBM3", 8, DGX_H100, True, "NV18"),
    ("NVIDIA H200", 8, DGX_H100, True, "NVSwitch"),
    ("NVIDIA B200", 8, DGX_H100, True, "NVSwitch"),
    ("NVIDIA A100-SXM4-80GB", 8, HGX_A100, False, "not an H100/H200/B200"),
    ("NVIDIA H100 80GB HBM3", 4, HGX_H100_4GPU, False, "NV6"),
    ("NVIDIA H100 NVL", 4, H100_NVL_PAIRS, False, "not an H100/H200/B200 SXM"),
    ("NVIDIA H100 80GB HBM3", 4, H100_NVL_PAIRS, False, "SYS"),
    ("NVIDIA H100 PCIe", 8, DGX_H100, False, "SXM"),
    ("NVIDIA H100 80GB HBM3", 1, DGX_H100, False, "one GPU"),
    ("NVIDIA H100 80GB HBM3", 8, None, False, "could not be read"),
    ("NVIDIA H100 80GB HBM3", 8, full(4, "NV18"), False, "no link"),
])
def test_nvls_needs_an_h100_class_sxm_part_on_a_switch(name: str, n: int, text: str | None,
                                                      present: bool, why: str) -> None:
    got, reason = nvls_support(name, n, text)
    assert got is present
    assert why in reason


def test_an_unknown_topology_warns_and_says_false() -> None:
    with pytest.warns(UserWarning, match="could not be read"):
        assert detect_nvls("NVIDIA H100 80GB HBM3", 8, None)[0] is False


@pytest.fixture
def eight_h100s(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """torch.cuda as on a DGX H100: 8 GPUs, every pair with peer access."""
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: True)
    return monkeypatch


def test_detect_reads_nvls_from_the_topology(eight_h100s: pytest.MonkeyPatch) -> None:
    eight_h100s.setattr(machine, "read_topology", lambda: DGX_H100)
    cluster = machine.detect()
    assert cluster.nvls
    assert cluster.intra_node == NVLINK4
    assert "NVLS" in cluster.name
    eight_h100s.setattr(machine, "read_topology", lambda: None)
    with pytest.warns(UserWarning, match="NVLS .* absent"):
        assert machine.detect().nvls is False
    eight_h100s.setattr(torch.cuda, "can_device_access_peer", lambda a, b: False)
    with pytest.warns(UserWarning, match="peer access"):
        cluster = machine.detect()  # PCIe: NVLS is not asked
    assert cluster.intra_node == PCIE5_X16
    assert not cluster.nvls


def test_without_nvidia_smi_the_topology_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvswitch.shutil, "which", lambda exe: None)
    assert nvswitch.read_topology() is None
