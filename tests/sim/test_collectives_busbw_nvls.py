"""Chapter 2's erratum: busbw equals a link's traffic only for the ring; NVLS can exceed it."""

from __future__ import annotations

from dpsim.sim.collectives.cost import busbw_GBps, collective_time_s
from dpsim.sim.collectives.group_cost import achieved_link
from dpsim.sim.collectives.nccl import choose, group_shape, nccl_time_s
from dpsim.sim.hardware import CLUSTERS

GiB = 2**30


def test_nvls_busbw_exceeds_the_achieved_nvlink() -> None:
    dgx = CLUSTERS["dgx-h100"]
    assert choose("all_reduce", GiB, dgx, group_shape(dgx))[0] == "nvls"
    busbw = busbw_GBps("all_reduce", GiB, dgx.world_size, nccl_time_s("all_reduce", GiB, dgx))
    assert busbw > achieved_link(dgx.intra_node).bandwidth_GBps


def test_ring_busbw_is_the_link_at_large_sizes() -> None:
    link = achieved_link(CLUSTERS["dgx-h100"].intra_node)
    t = collective_time_s("all_reduce", 64 * GiB, 8, link)
    assert 0.99 * link.bandwidth_GBps < busbw_GBps("all_reduce", 64 * GiB, 8, t) \
        <= link.bandwidth_GBps
