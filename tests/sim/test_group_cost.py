"""One cost per collective over a process group: NCCL's model on GPU links, the closed form on
generic ones; HSDP's two mesh groups; rail-optimized fabrics or not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.collectives.group_cost import (
    fabric_cluster,
    group_link,
    group_time_s,
    mesh_shapes,
    uses_nccl,
)
from dpsim.sim.collectives.link_constants import SPINE_EXTRA_SWITCH_HOPS, SWITCH_HOP_US
from dpsim.sim.collectives.nccl import GroupShape, choose, group_shape, nccl_time_s
from dpsim.sim.hardware import H100_80GB, SHARED_MEMORY, Cluster, Link, get_cluster
from dpsim.sim.planner import crossover, crossover_formula
from dpsim.sim.strategies import ddp
from dpsim.sim.strategies.fsdp import hsdp
from dpsim.sim.workload import get_workload
from tests.support.links import ring_link_of

IB4 = get_cluster("h100-ib-4")
CPU = Cluster("4 gloo ranks", H100_80GB, 2, 2, SHARED_MEMORY, Link("calibrated", 1.0, 40.0))
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
MiB = 2**20


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("algorithm", ["auto", "ring", "tree", "naive"])
def test_generic_links_keep_the_closed_form(collective: str, algorithm: str) -> None:
    shape = group_shape(CPU)
    assert not uses_nccl(CPU, shape)
    closed = "ring" if algorithm == "auto" else algorithm
    assert group_time_s(collective, 3 * MiB, CPU, shape, algorithm) == collective_time_s(
        collective, 3 * MiB, 4, ring_link_of(CPU, 4), closed)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_gpu_links_pay_nccl(collective: str) -> None:
    for n, per in ((32, 8), (8, 8), (4, 1), (16, 4)):
        shape = group_shape(IB4, n, per)
        assert uses_nccl(IB4, shape)
        for nbytes in (0, 4096, 64 * MiB):
            assert group_time_s(collective, nbytes, IB4, shape) == nccl_time_s(
                collective, nbytes, IB4, n, ranks_per_node=per)


def test_a_forced_algorithm_runs_where_nccl_has_it_else_the_ring() -> None:
    big, node = group_shape(IB4), group_shape(IB4, 8)
    for name in ("ring", "tree"):  # DDP's knob keeps its meaning across nodes
        assert group_time_s("all_reduce", 64 * MiB, IB4, big, name) == nccl_time_s(
            "all_reduce", 64 * MiB, IB4, algorithm=name)
    # no tree inside one node in this model, and NCCL's all-gather is a ring: the ring
    assert group_time_s("all_reduce", MiB, IB4, node, "tree") == nccl_time_s(
        "all_reduce", MiB, IB4, 8, algorithm="ring")
    assert group_time_s("all_gather", MiB, IB4, big, "tree") == nccl_time_s(
        "all_gather", MiB, IB4)
    assert group_time_s("all_reduce", MiB, IB4, node, "nvls") == nccl_time_s(
        "all_reduce", MiB, IB4, 8, algorithm="nvls")
    # "naive" is no NCCL algorithm: the textbook form on the group's achieved link
    assert group_time_s("all_reduce", MiB, IB4, big, "naive") == collective_time_s(
        "all_reduce", MiB, 32, group_link(IB4, big), "naive")
    assert choose("all_reduce", 2**30, IB4, big)[0] in ("ring", "tree")


def test_ddp_buckets_cost_the_cluster_group() -> None:
    w = get_workload("gpt2-124m")
    for algorithm in ("auto", "ring", "tree"):
        tr = ddp.simulate(w, IB4, ddp.DDPConfig(algorithm=algorithm))
        for e in tr.filter(kind="all_reduce"):
            assert e.duration_s == pytest.approx(nccl_time_s(
                "all_reduce", e.nbytes, IB4, algorithm=algorithm), rel=1e-12)
    cpu = ddp.simulate(w, CPU, ddp.DDPConfig())  # chapters 1-5: the closed form, unchanged
    for e in cpu.filter(kind="all_reduce"):
        assert e.duration_s == pytest.approx(
            ddp.all_reduce_time_s(e.nbytes, 4, ring_link_of(CPU, 4)), rel=1e-12)


def test_hsdp_costs_its_two_mesh_groups_apart() -> None:
    assert mesh_shapes(IB4, 8) == (GroupShape(1, 8), GroupShape(4, 1))
    assert mesh_shapes(IB4, 4) == (GroupShape(1, 4), GroupShape(4, 2))
    assert mesh_shapes(IB4, 16) == (GroupShape(2, 8), GroupShape(2, 1))
    assert mesh_shapes(IB4, 32) == (GroupShape(4, 8), GroupShape(1, 1))
    tr = hsdp.simulate(get_workload("gpt2-124m"), IB4, hsdp.HSDPConfig(shard_size=8))
    for e in tr.filter(stream="replicate"):  # one rank per node, each on its own rail
        assert e.duration_s == pytest.approx(
            nccl_time_s("all_reduce", e.nbytes, IB4, 4, ranks_per_node=1), rel=1e-12)
    for e in tr.filter(stream="comm"):  # one node: NVLink (and NVLS where it helps)
        assert e.duration_s == pytest.approx(nccl_time_s(e.kind, e.nbytes, IB4, 8), rel=1e-12)


def test_a_fabric_that_is_not_rail_optimized_adds_the_spines_hops() -> None:
    flat = replace(IB4, rail_optimized=False)
    extra = SPINE_EXTRA_SWITCH_HOPS.value * SWITCH_HOP_US.value
    assert fabric_cluster(IB4) is IB4
    net, spine = IB4.inter_node, fabric_cluster(flat).inter_node
    assert net is not None
    assert spine is not None
    assert spine.latency_us == net.latency_us + extra
    big, node = group_shape(IB4), group_shape(IB4, 8)
    for nbytes in (4096, 64 * MiB):
        assert group_time_s("all_reduce", nbytes, flat, big) > group_time_s(
            "all_reduce", nbytes, IB4, big)
        assert group_time_s("all_reduce", nbytes, flat, node) == group_time_s(
            "all_reduce", nbytes, IB4, node)  # inside a node the fabric is not crossed
    assert not get_cluster("h100-eth-4").rail_optimized
    assert get_cluster("dgx-h100").rail_optimized
    with pytest.raises(ValueError, match="rail_optimized"):
        replace(IB4, rail_optimized="no")  # type: ignore[arg-type]


def test_crossover_keeps_the_closed_form_on_generic_links() -> None:
    w = get_workload("gpt2-124m")
    generic = Cluster("generic GPUs", H100_80GB, 8, 16, Link("nv", 300.0, 2.0),
                      Link("net", 40.0, 6.0))
    cr = crossover(w, generic, "ddp", 1024)
    assert not cr.topology
    assert cr.formula_devices == pytest.approx(crossover_formula(
        cr.hide_s_per_sample, 1024, cr.comm_factor, cr.model_bytes, cr.alpha_terms, cr.link,
        cr.hide_fixed_s))
    gpu = crossover(w, IB4, "ddp", 1024, n_devices=(1, 2, 4, 8, 16, 32))
    assert gpu.topology
    assert "C*t_N" in gpu.formula
