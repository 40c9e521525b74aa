"""How detect() decides the link between this machine's GPUs (pure given name and peers)."""

import pytest

from dpsim.runtime.machine import intra_link
from dpsim.sim.hardware import NVLINK3, NVLINK4, PCIE3_X16, PCIE4_X16, PCIE5_X16


def test_nvlink_needs_an_sxm_part_with_peer_access() -> None:
    assert intra_link("NVIDIA H100 80GB HBM3", peers=True)[0] == NVLINK4
    assert intra_link("NVIDIA A100-SXM4-80GB", peers=True)[0] == NVLINK3
    assert intra_link("NVIDIA A100-PCIE-40GB", peers=True)[0] == PCIE4_X16
    assert intra_link("NVIDIA H100 PCIe", peers=True)[0] == PCIE5_X16
    assert intra_link("Tesla T4", peers=True)[0] == PCIE3_X16
    with pytest.warns(UserWarning, match="without peer access"):
        assert intra_link("NVIDIA H100 80GB HBM3", peers=False)[0] == PCIE5_X16


def test_an_unknown_gpu_warns() -> None:
    with pytest.warns(UserWarning, match="unknown"):
        link, how = intra_link("NVIDIA L40S", peers=True)
    assert link == PCIE4_X16
    assert "assumed" in how
