"""NCCL's protocols in dpsim.sim.collectives.nccl: which pair is chosen, what each costs, and
that bad input names its field."""

import pytest

from dpsim.sim import choose, group_shape, nccl_time_s
from dpsim.sim.collectives import protocols
from dpsim.sim.collectives.nccl import DEFAULT_PARAMS, GroupShape, pairs, time_terms
from dpsim.sim.hardware import CLUSTERS, get_cluster
from tests.support.links import forced_time_s

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
        times = [forced_time_s("all_reduce", s, IB4, group_shape(IB4), a, protocol=p)
                 for a, p in pairs("all_reduce", IB4, group_shape(IB4))]
        assert t == min(times) == nccl_time_s("all_reduce", s, IB4)
        assert t == nccl_time_s("all_reduce", s, IB4, algorithm=algo, protocol=proto)


def test_enabled_pairs_follow_nccl() -> None:
    # NVLS and NVLSTree run Simple only; LL128 needs NVLink between the GPUs
    assert pairs("all_reduce", NODE, GroupShape(1, 8)) == [
        ("ring", "LL"), ("ring", "LL128"), ("ring", "Simple"), ("nvls", "Simple")]
    assert pairs("all_reduce", PCIE, GroupShape(1, 4)) == [("ring", "LL"), ("ring", "Simple")]
    assert pairs("broadcast", IB4, group_shape(IB4), "LL128") == [("ring", "LL128")]
    assert ("tree", "LL128") in pairs("all_reduce", IB4, group_shape(IB4))


def test_protocols_cost_what_nccl_says_relative_to_simple() -> None:
    node = GroupShape(1, 8)
    terms = {p: time_terms("all_reduce", NODE, node, "ring", p) for p in ("LL", "LL128", "Simple")}
    assert terms["LL"][1] == pytest.approx(2 * terms["Simple"][1])  # half the bandwidth
    assert terms["LL128"][1] == pytest.approx(terms["Simple"][1] / 0.92)
    # NCCL's latency: base + 2(n-1) steps of its NVLink hop (LL 0.6, LL128 1.9, Simple 3.4)
    launch = DEFAULT_PARAMS.launch_us
    for p, base, hop in (("LL", 6.6, 0.6), ("LL128", 14.0, 1.9), ("Simple", 8.4, 3.4)):
        assert terms[p][0] == pytest.approx((launch + base + 14 * hop) * 1e-6)
    # a tree across 4 nodes: 2 x (7 NVLink hops + log2(4) network steps), LL over the net
    net = DEFAULT_PARAMS.net_us(IB4.inter_node)
    tree_ll = time_terms("all_reduce", IB4, group_shape(IB4), "tree", "LL")[0]
    assert tree_ll == pytest.approx((launch + 6.8 + 2 * (7 * 0.6 + 2 * (5.0 + net))) * 1e-6)
    # across nodes LL is capped at the fitted per-node rate of the network
    p5 = CLUSTERS["p5"]
    ll = time_terms("all_reduce", p5, GroupShape(2, 8), "tree", "LL")[1]
    assert ll >= 1 / DEFAULT_PARAMS.ll_cap(p5.inter_node)
    assert protocols.bandwidth_factor("tree", "LL") == pytest.approx(1 / 3.8)


def test_bad_protocols_name_the_field() -> None:
    shape = group_shape(NODE)
    with pytest.raises(ValueError, match="protocol='LL256'"):
        nccl_time_s("all_reduce", 1024, NODE, protocol="LL256")
    with pytest.raises(ValueError, match="protocol='LL'"):
        forced_time_s("all_reduce", 1024, NODE, shape, "nvls", protocol="LL")
    with pytest.raises(ValueError, match="protocol='LL128'"):
        choose("all_reduce", 1024, PCIE, group_shape(PCIE), protocol="LL128")
    with pytest.raises(ValueError, match="nbytes=-1"):
        choose("all_reduce", -1, NODE, shape)
