"""The topology-aware collective model (dpsim.sim.collectives.nccl), presets and GPU names."""

import warnings
from dataclasses import replace

import pytest

from dpsim.sim import choose, group_shape, nccl_time_s
from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.collectives.group_cost import achieved_link
from dpsim.sim.collectives.link_constants import (
    ACHIEVED_FRACTION,
    FILL_BYTES,
    FILL_US,
    NVLS_FRACTIONS,
)
from dpsim.sim.collectives.nccl import DEFAULT_PARAMS, GroupShape, available, rates
from dpsim.sim.hardware import (
    CLUSTERS,
    DEVICES,
    H100_80GB,
    INFINIBAND_NDR,
    NVLINK4,
    Cluster,
    device_for_name,
    get_cluster,
)
from dpsim.sim.hardware.gpu_specs import SPECS, match_name
from tests.support.links import forced_time_s, ring_link_of

IB16 = get_cluster("h100-ib-16")
NV = ACHIEVED_FRACTION["nvlink"].value * NVLINK4.bandwidth_GBps * 1e9
IB = DEFAULT_PARAMS.fraction(INFINIBAND_NDR) * INFINIBAND_NDR.bandwidth_GBps * 1e9
GiB = 2**30


def simple(latency_us: float, t_bw: float, fill_s: float = 0.0) -> float:
    """NCCL's form: launch + NCCL's latency of the pair + bytes / rate (+ the fill term)."""
    return (DEFAULT_PARAMS.launch_us + latency_us) * 1e-6 + t_bw + fill_s


def fill(link_name: str, s: float) -> float:
    """The fill term by its formula, read from the shipped tables, seconds."""
    k, s0 = FILL_US[link_name].value, FILL_BYTES[link_name].value
    return k * 1e-6 * s / (s + s0)


def test_ring_across_nodes_uses_every_nic_of_a_node() -> None:
    shape = GroupShape(16, 8)
    b_i, b_n, _ = rates(IB16, shape)
    assert (b_i, b_n) == (pytest.approx(NV), pytest.approx(8 * IB))
    n, s = 128, GiB
    net = 14.0 + 2 * DEFAULT_PARAMS.net_us(INFINIBAND_NDR)  # NCCL: NET Simple + flush
    latency = 8.4 + (2 * (n - 1) - 30) * 3.4 + 30 * net  # 2(m-1) = 30 network steps
    expected = simple(latency, 2 * (n - 1) / n * s / min(NV, 8 * IB),
                      fill(INFINIBAND_NDR.name, s))
    assert forced_time_s("all_reduce", s, IB16, shape, "ring", protocol="Simple") == \
        pytest.approx(expected)
    # the old model sent everything through one NIC: several times slower
    one_nic = collective_time_s("all_reduce", s, n, INFINIBAND_NDR)
    assert one_nic > 4 * forced_time_s("all_reduce", s, IB16, shape, "ring")


def test_tree_is_the_pipelined_hierarchy_not_log2_rings() -> None:
    shape = GroupShape(16, 8)
    s = GiB
    b_s = NVLINK4.bandwidth_GBps * 1e9 * DEFAULT_PARAMS.nvls(NVLINK4)
    t_bw = max(s / b_s, 2 * 15 / 16 * s / (8 * IB))  # NVLS in the node, 1/8 of S per NIC
    net = 20.9 + 2 * DEFAULT_PARAMS.net_us(INFINIBAND_NDR)
    tree = forced_time_s("all_reduce", s, IB16, shape, "tree", protocol="Simple")
    assert tree == pytest.approx(simple(25.0 + 2 * 4 * net, t_bw,  # NCCL's NVLSTree
                                        fill(INFINIBAND_NDR.name, s)))
    ring = forced_time_s("all_reduce", s, IB16, shape, "ring")
    assert 0.5 < tree / ring < 2  # close to the ring at large sizes, unlike L x the ring
    small = [forced_time_s("all_reduce", 1024, IB16, shape, a) for a in ("ring", "tree")]
    assert small[1] < small[0] / 3  # and far faster at small ones (log2 hops, not 2N)


def test_choice_takes_the_fastest_available_and_can_be_overridden() -> None:
    shape = group_shape(IB16)
    assert available("all_reduce", IB16, shape) == ("ring", "tree")
    assert available("all_gather", IB16, shape) == ("ring",)  # NVLS across nodes: CollNet
    node = CLUSTERS["h100-node"]
    for coll in ("all_reduce", "all_gather", "reduce_scatter"):
        assert available(coll, node, GroupShape(1, 8)) == ("ring", "nvls")
    assert available("broadcast", node, GroupShape(1, 8)) == ("ring",)
    for s in (1024, 2**20, GiB):
        best = choose("all_reduce", s, IB16, shape)[0]
        times = {a: nccl_time_s("all_reduce", s, IB16, algorithm=a) for a in ("ring", "tree")}
        assert nccl_time_s("all_reduce", s, IB16) == min(times.values()) == times[best]
    with pytest.raises(ValueError, match="algorithm='nvls'"):
        nccl_time_s("all_reduce", 1024, IB16, algorithm="nvls")


def test_sub_groups_map_to_the_links_they_cross() -> None:
    # HSDP: the shard group is one node (NVLink only), the replicate group one rank a node
    shard = nccl_time_s("reduce_scatter", GiB, IB16, 8)
    one_node = GroupShape(1, 8)
    assert shard == min(forced_time_s("reduce_scatter", GiB, IB16, one_node, a)
                        for a in ("ring", "nvls"))
    replicate = group_shape(IB16, 16, ranks_per_node=1)
    assert rates(IB16, replicate)[1] == pytest.approx(IB)  # its own rail: one NIC's share
    assert nccl_time_s("all_reduce", GiB, IB16, 16, ranks_per_node=1) > shard
    with pytest.raises(ValueError, match="n_devices=12"):
        group_shape(IB16, 12)


def test_achieved_bandwidth_is_below_spec_on_one_node() -> None:
    node = CLUSTERS["a100-node"]
    assert ring_link_of(node, 8).bandwidth_GBps == pytest.approx(0.82 * 300)
    assert achieved_link(ring_link_of(node, 8)) == ring_link_of(node, 8)  # generic stays as given
    nvls = CLUSTERS["h100-node"]
    b_s = rates(nvls, GroupShape(1, 8))[2]
    assert b_s / 1e9 == pytest.approx(450 * NVLS_FRACTIONS["NVLink 4 (H100)"].value)


def test_every_preset_is_sourced_and_identified_by_its_cuda_name() -> None:
    for key, spec in SPECS.items():
        assert spec.source
        assert key in DEVICES
        assert spec.bf16_tflops > spec.fp32_tflops > 0
    names: list[tuple[str, str | None]] = [
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA H100 80GB HBM3", "h100-80gb"),
        ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"), ("NVIDIA B200", "b200"),
        ("NVIDIA L4", "l4"), ("Tesla T4", "t4"), ("NVIDIA A10G", "a10g"), ("NVIDIA A10", "a10"),
        ("NVIDIA GeForce RTX 3070", "rtx-3070"), ("NVIDIA GeForce RTX 3080", "rtx-3080"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("NVIDIA GeForce RTX 4080", "rtx-4080"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("Tesla V100-SXM2-32GB", "v100-32gb"),
        ("AMD Instinct MI300X", "mi300x"), ("NVIDIA L40S", None), ("NVIDIA GH200 480GB", None)]
    for cuda, expected in names:
        assert match_name(cuda) == expected, cuda
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h200 = device_for_name("NVIDIA H200", 141 * GiB)
    assert h200.bf16_tflops == DEVICES["h200"].bf16_tflops
    assert h200.memory_GiB == 141
    with pytest.warns(UserWarning, match="not among dpsim's presets"):
        device_for_name("NVIDIA L40S", 48 * GiB)
    with pytest.warns(UserWarning, match="A10's figures"):
        device_for_name("NVIDIA A10G", 24 * GiB)


def test_cluster_presets_describe_their_nodes() -> None:
    p5 = CLUSTERS["p5"]
    assert (p5.nics, p5.nvls, p5.inter_node is not None) == (32, True, True)
    assert CLUSTERS["dgx-h100"].nics == 8  # one NIC per GPU
    grown = replace(CLUSTERS["dgx-a100"], n_nodes=4)
    assert ring_link_of(grown, 32).bandwidth_GBps < ring_link_of(grown, 8).bandwidth_GBps
    with pytest.raises(ValueError, match="nics_per_node=-1"):
        Cluster("x", H100_80GB, 8, 1, NVLINK4, nics_per_node=-1)


def test_fill_term_grows_with_size_and_saturates_and_is_the_same_for_every_pair() -> None:
    """The fill term (dpsim.sim.collectives.params): K x S / (S + S0) on the group's bottleneck
    link: the network across nodes, the node's fabric on one node; 0 at 0 bytes, K/2 at S0,
    under K always; every (algorithm, protocol) pair pays the same, so NCCL's choice of the
    pair is unchanged by it."""
    name = INFINIBAND_NDR.name
    k, s0 = FILL_US[name].value, FILL_BYTES[name].value
    assert DEFAULT_PARAMS.fill_s(INFINIBAND_NDR, 0) == 0.0
    assert DEFAULT_PARAMS.fill_s(INFINIBAND_NDR, s0) == pytest.approx(k * 1e-6 / 2)
    assert DEFAULT_PARAMS.fill_s(INFINIBAND_NDR, 2**40) < k * 1e-6
    shape = GroupShape(16, 8)
    no_fill = replace(DEFAULT_PARAMS, fill_us={})
    for algo, proto in (("ring", "Simple"), ("tree", "LL128"), ("ring", "LL")):
        with_it = forced_time_s("all_reduce", int(s0), IB16, shape, algo, protocol=proto)
        without = forced_time_s("all_reduce", int(s0), IB16, shape, algo, no_fill,
                                   protocol=proto)
        assert with_it - without == pytest.approx(k * 1e-6 / 2)
    one_node = GroupShape(1, 8)  # on one node the NVSwitch's own fill, not the network's
    nv = forced_time_s("all_reduce", GiB, IB16, one_node, "ring", protocol="Simple")
    nv0 = forced_time_s("all_reduce", GiB, IB16, one_node, "ring", no_fill, protocol="Simple")
    assert nv - nv0 == pytest.approx(fill(NVLINK4.name, GiB))
