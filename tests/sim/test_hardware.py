import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from dpsim.runtime.machine import detect
from dpsim.sim import cpu_device, get_cluster, get_device, group_shape
from dpsim.sim.collectives.link_constants import ACHIEVED_FRACTION
from dpsim.sim.collectives.nccl import DEFAULT_PARAMS
from dpsim.sim.cost.compute import backward_time_s, forward_time_s, optimizer_time_s
from dpsim.sim.hardware import (
    CLUSTERS,
    DEVICES,
    H100_80GB,
    INFINIBAND_NDR,
    NVLINK4,
    Cluster,
    Device,
    Link,
)
from dpsim.sim.limits import (
    MAX_COUNT,
    MAX_FLOPS,
    MAX_OVERHEAD_US,
    MAX_RATE,
    MIN_EFFICIENCY,
    MIN_RATE,
)
from dpsim.sim.workload import Layer
from tests.support.bad_input import raises_naming
from tests.support.links import ring_link_of


def test_presets_have_the_documented_shapes() -> None:
    assert get_device("h100-80gb").memory_GiB == 80
    assert get_device("a100-40gb").memory_GiB == 40
    node = get_cluster("h100-node")
    assert node.world_size == 8
    assert node.intra_node == NVLINK4
    assert get_cluster("h100-ib-128").world_size == 1024
    assert set(DEVICES) >= {"a100-40gb", "a100-80gb", "h100-80gb"}
    assert len(CLUSTERS) >= 5


def test_group_link_gives_the_achieved_ring_link() -> None:
    big = get_cluster("h100-ib-4")
    nvlink = ACHIEVED_FRACTION["nvlink"].value * NVLINK4.bandwidth_GBps
    ib = DEFAULT_PARAMS.fraction(INFINIBAND_NDR) * INFINIBAND_NDR.bandwidth_GBps  # fitted
    assert ring_link_of(big, 8).bandwidth_GBps == pytest.approx(nvlink)
    assert ring_link_of(big, 8).latency_us == NVLINK4.latency_us
    # across nodes a rank's ring share is all 8 NICs of its node, capped by NVLink
    assert ring_link_of(big, 16).bandwidth_GBps == pytest.approx(min(nvlink, 8 * ib))
    assert ring_link_of(big, 16).latency_us == max(NVLINK4.latency_us, INFINIBAND_NDR.latency_us)
    few_nics = replace(big, nics_per_node=1)
    assert ring_link_of(few_nics, 16).bandwidth_GBps == pytest.approx(ib)


def test_with_devices_fills_nodes() -> None:
    node = get_cluster("h100-node")
    assert node.with_devices(4).world_size == 4
    grown = node.with_devices(64)
    assert (grown.n_nodes, grown.world_size) == (8, 64)
    with pytest.raises(ValueError, match="n_devices=12"):
        node.with_devices(12)


def test_bad_presets_and_fields_raise_valueerror() -> None:
    with pytest.raises(ValueError, match=r"name='h300'.*allowed"):
        get_device("h300")
    with pytest.raises(ValueError, match="name='nope'"):
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


NODE = CLUSTERS["h100-node"]
GOOD_DEVICE: dict[str, Any] = {"name": "x", "kind": "gpu", "memory_GiB": 1.0, "fp32_tflops": 1.0,
                               "bf16_tflops": 1.0, "mem_bw_GBps": 1.0}


def _device(**bad: object) -> Device:
    return Device(**{**GOOD_DEVICE, **bad})


def _cluster(**bad: object) -> Cluster:
    good: dict[str, Any] = {"name": "c", "device": H100_80GB, "devices_per_node": 8,
                            "n_nodes": 2, "intra_node": NVLINK4, "inter_node": INFINIBAND_NDR}
    return Cluster(**{**good, **bad})


BAD_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("name", lambda: _device(name=3)),
    ("kind", lambda: _device(kind="tpu")),
    ("memory_GiB", lambda: _device(memory_GiB=math.nan)),
    ("memory_GiB", lambda: _device(memory_GiB=2.0**31)),
    ("fp32_tflops", lambda: _device(fp32_tflops=-1)),
    ("fp32_tflops", lambda: _device(fp32_tflops=1e-300)),
    ("bf16_tflops", lambda: _device(bf16_tflops=math.inf)),
    ("bf16_tflops", lambda: _device(bf16_tflops="1")),
    ("mem_bw_GBps", lambda: _device(mem_bw_GBps=True)),
    ("mem_bw_GBps", lambda: _device(mem_bw_GBps=1e13)),
    ("op_overhead_us", lambda: _device(op_overhead_us=math.inf)),
    ("op_overhead_us", lambda: _device(op_overhead_us=-1)),
    ("efficiency", lambda: _device(efficiency=0)),
    ("efficiency", lambda: _device(efficiency=1.5)),
    ("efficiency", lambda: _device(efficiency=math.nan)),
    ("name", lambda: Link(None, 1, 1)),  # type: ignore[arg-type]
    ("bandwidth_GBps", lambda: Link("x", math.inf, 1)),
    ("bandwidth_GBps", lambda: Link("x", 0, 1)),
    ("latency_us", lambda: Link("x", 1, math.inf)),
    ("latency_us", lambda: Link("x", 1, -0.5)),
    ("name", lambda: _cluster(name=b"c")),
    ("device", lambda: _cluster(device="h100-80gb")),
    ("devices_per_node", lambda: _cluster(devices_per_node=True)),
    ("devices_per_node", lambda: _cluster(devices_per_node=8.0)),
    ("n_nodes", lambda: _cluster(n_nodes=0)),
    ("n_nodes", lambda: _cluster(n_nodes=10**6)),
    ("intra_node", lambda: _cluster(intra_node="nvlink")),
    ("inter_node", lambda: _cluster(inter_node=NVLINK4.bandwidth_GBps)),
    ("inter_node", lambda: _cluster(inter_node=None)),
    ("n_devices", lambda: NODE.with_devices(0)),
    ("n_devices", lambda: NODE.with_devices(8 * 4096 + 8)),  # more nodes than a cluster has
    ("n_devices", lambda: NODE.with_devices(True)),
    ("n_devices", lambda: group_shape(NODE, 9)),
    ("n_devices", lambda: group_shape(NODE, 2.0)),  # type: ignore[arg-type]
    ("n_cores", lambda: cpu_device(0)),
    ("n_cores", lambda: cpu_device(-4)),
    ("n_cores", lambda: cpu_device(True)),
    ("n_cores", lambda: cpu_device(10**9)),
    ("dtype", lambda: H100_80GB.tflops("FP32")),
    ("name", lambda: get_device(None)),  # type: ignore[arg-type]
    ("name", lambda: get_cluster(["h100-node"])),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("field", "call"), BAD_CALLS,
                         ids=[f"{i}-{field}" for i, (field, _) in enumerate(BAD_CALLS)])
def test_bad_hardware_inputs_name_their_field(field: str, call: Callable[[], object]) -> None:
    with raises_naming(field):
        call()


def test_infinite_overhead_is_reported_as_not_finite() -> None:
    with pytest.raises(ValueError, match=r"^op_overhead_us=inf is not finite; give a finite"):
        _device(op_overhead_us=math.inf)
    with pytest.raises(ValueError, match=r"^latency_us=inf is not finite; give a finite"):
        Link("x", 1, math.inf)


def test_presets_and_calibration_units_stay_within_the_bounds() -> None:
    unit = Device("unit", "cpu", 1.0, 1e9, 1e9, 1e12, op_overhead_us=1.0, efficiency=1.0)
    assert unit.mem_bw_GBps == 1e12  # runtime.device_calibration's unit device
    assert cpu_device(2).fp32_tflops == pytest.approx(0.1)
    assert cpu_device(None).kind == "cpu"


@pytest.mark.parametrize("rate", [MIN_RATE, MAX_RATE])
@pytest.mark.parametrize("overhead_us", [0.0, MAX_OVERHEAD_US])
def test_times_at_the_bounds_are_finite_and_not_negative(rate: float, overhead_us: float) -> None:
    """The slowest and fastest devices allowed, on the largest layer: finite seconds."""
    device = replace(H100_80GB, fp32_tflops=rate, bf16_tflops=rate, mem_bw_GBps=rate,
                     op_overhead_us=overhead_us, efficiency=MIN_EFFICIENCY)
    huge = Layer("huge", "Linear", MAX_COUNT, MAX_COUNT, MAX_COUNT, MAX_COUNT, MAX_FLOPS)
    times = [forward_time_s(huge, MAX_COUNT, device, "fp32", "bf16"),
             backward_time_s(huge, MAX_COUNT, device, "fp32", "bf16"),
             optimizer_time_s(MAX_COUNT, MAX_COUNT, device, "adamw")]
    assert all(math.isfinite(t) and t >= 0 for t in times)
