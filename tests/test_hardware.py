import pytest

from dpsim.hardware import (
    CLUSTERS,
    DEVICES,
    H100_80GB,
    INFINIBAND_NDR,
    NVLINK4,
    Device,
    Link,
    get_cluster,
    get_device,
)
from dpsim.runtime.machine import detect


def test_presets_have_the_documented_shapes() -> None:
    assert get_device("h100-80gb").memory_GiB == 80
    assert get_device("a100-40gb").memory_GiB == 40
    node = get_cluster("h100-node")
    assert node.world_size == 8
    assert node.intra_node == NVLINK4
    assert get_cluster("h100-ib-128").world_size == 1024
    assert set(DEVICES) >= {"a100-40gb", "a100-80gb", "h100-80gb"}
    assert len(CLUSTERS) >= 5


def test_link_for_uses_the_slowest_link_crossed() -> None:
    big = get_cluster("h100-ib-4")
    assert big.link_for(8) == NVLINK4
    assert big.link_for(16) == INFINIBAND_NDR


def test_with_devices_fills_nodes() -> None:
    node = get_cluster("h100-node")
    assert node.with_devices(4).world_size == 4
    grown = node.with_devices(64)
    assert (grown.n_nodes, grown.world_size) == (8, 64)
    with pytest.raises(ValueError, match="n_devices=12"):
        node.with_devices(12)


def test_bad_presets_and_fields_raise_valueerror() -> None:
    with pytest.raises(ValueError, match=r"device='h200'.*allowed"):
        get_device("h200")
    with pytest.raises(ValueError, match="cluster='nope'"):
        get_cluster("nope")
    with pytest.raises(ValueError, match="memory_GiB=-1"):
        Device("x", "gpu", -1, 1, 1, 1)
    with pytest.raises(ValueError, match="kind='tpu'"):
        Device("x", "tpu", 1, 1, 1, 1)
    with pytest.raises(ValueError, match="bandwidth_GBps=0"):
        Link("x", 0, 1)


def test_tflops_by_dtype() -> None:
    assert H100_80GB.tflops("bf16") > H100_80GB.tflops("fp32")
    with pytest.raises(ValueError, match="dtype='int8'"):
        H100_80GB.tflops("int8")


def test_detect_describes_this_machine() -> None:
    here = detect()
    assert here.world_size >= 1
    assert here.device.memory_GiB > 0
