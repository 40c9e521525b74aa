"""NCCL's protocols in dpsim.collectives.nccl: which pair is chosen, what each costs, and
that bad input names its field."""

import pytest

from dpsim.collectives import protocols
from dpsim.collectives.nccl import (
    DEFAULT_PARAMS,
    GroupShape,
    algorithm_time_s,
    choose,
    choose_algorithm,
    group_shape,
    nccl_time_s,
    pairs,
    time_terms,
)
from dpsim.hardware import CLUSTERS, NVLINK4, get_cluster

IB4 = get_cluster("h100-ib-4")
NODE = CLUSTERS["h100-node"]
PCIE = CLUSTERS["pcie-4gpu"]
GiB = 2**30


def test_small_messages_take_ll_and_large_ones_simple() -> None:
    for cluster in (IB4, NODE, CLUSTERS["p4de"], PCIE):
        shape = group_shape(cluster)
        assert choose("all_reduce", 8, cluster, shape)[1] == "LL"
        assert choose("all_reduce", 8 * GiB, cluster, shape)[1] == "Simple"
        assert choose("all_gather", 8, cluster, shape)[1] == "LL"
    # the protocol's time is the smallest of its pairs, and what nccl_time_s returns
    for s in (8, 2**16, 2**22, GiB):
        algo, proto, t = choose("all_reduce", s, IB4, group_shape(IB4))
        times = [algorithm_time_s("all_reduce", s, IB4, group_shape(IB4), a, protocol=p)
                 for a, p in pairs("all_reduce", IB4, group_shape(IB4))]
        assert t == min(times) == nccl_time_s("all_reduce", s, IB4)
        assert choose_algorithm("all_reduce", s, IB4, group_shape(IB4)) == algo
        assert t == nccl_time_s("all_reduce", s, IB4, algorithm=algo, protocol=proto)


def test_enabled_pairs_follow_nccl() -> None:
    # NVLS and NVLSTree run Simple only; LL128 needs NVLink between the GPUs
    assert pairs("all_reduce", NODE, GroupShape(1, 8)) == [
        ("ring", "LL"), ("ring", "LL128"), ("ring", "Simple"), ("nvls", "Simple")]
    assert pairs("all_reduce", PCIE, GroupShape(1, 4)) == [("ring", "LL"), ("ring", "Simple")]
    assert pairs("broadcast", IB4, group_shape(IB4), "LL128") == [("ring", "LL128")]
    assert ("tree", "LL128") in pairs("all_reduce", IB4, group_shape(IB4))


def test_protocols_cost_what_nccl_says_relative_to_simple() -> None:
    shape = group_shape(IB4)
    per_byte = {p: time_terms("all_reduce", IB4, shape, "ring", p)[1]
                for p in ("LL", "LL128", "Simple")}
    assert per_byte["LL"] == pytest.approx(2 * per_byte["Simple"])  # half the bandwidth
    assert per_byte["LL128"] == pytest.approx(per_byte["Simple"] / 0.92)
    node = GroupShape(1, 8)
    latency = {p: time_terms("all_reduce", NODE, node, "ring", p)[0]
               for p in ("LL", "LL128", "Simple")}
    assert latency["LL"] < latency["LL128"] < latency["Simple"]
    hops = 2 * 8 * DEFAULT_PARAMS.hop_s(NVLINK4)  # 2 passes of 8 hops, LL: 0.6/3.4 of each
    launch = DEFAULT_PARAMS.launch_us * 1e-6
    assert latency["LL"] == pytest.approx(launch + 6.6e-6 + hops * 0.6 / 3.4)
    assert protocols.hop_ratio(NVLINK4, "tree", "LL128") == pytest.approx(1.25 / 4.0)
    # across nodes LL is capped at the fitted per-node rate of the network
    p5 = CLUSTERS["p5"]
    ll = time_terms("all_reduce", p5, GroupShape(2, 8), "tree", "LL")[1]
    assert ll >= 1 / DEFAULT_PARAMS.ll_cap(p5.inter_node)


def test_bad_protocols_name_the_field() -> None:
    shape = group_shape(NODE)
    with pytest.raises(ValueError, match="protocol='LL256'"):
        nccl_time_s("all_reduce", 1024, NODE, protocol="LL256")
    with pytest.raises(ValueError, match="protocol='LL'"):
        algorithm_time_s("all_reduce", 1024, NODE, shape, "nvls", protocol="LL")
    with pytest.raises(ValueError, match="protocol='LL128'"):
        choose("all_reduce", 1024, PCIE, group_shape(PCIE), protocol="LL128")
    with pytest.raises(ValueError, match="nbytes=-1"):
        choose("all_reduce", -1, NODE, shape)
    with pytest.raises(ValueError, match="algorithm='tree'"):
        time_terms("all_reduce", NODE, shape, "tree", "Simple")
