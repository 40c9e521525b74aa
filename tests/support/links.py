"""Questions the tests ask the collective model in short: a ring's link, a forced algorithm."""

from __future__ import annotations

from dpsim.sim.collectives.group_cost import group_link
from dpsim.sim.collectives.nccl import GroupShape, group_shape, nccl_time_s
from dpsim.sim.collectives.params import DEFAULT_PARAMS, ModelParams
from dpsim.sim.hardware import Cluster, Link


def ring_link_of(cluster: Cluster, n_devices: int) -> Link:
    """`group_link` of the group of the first `n_devices` devices (nodes filled first)."""
    return group_link(cluster, group_shape(cluster, n_devices))


def forced_time_s(collective: str, nbytes: int, cluster: Cluster, shape: GroupShape,
                  algorithm: str, params: ModelParams = DEFAULT_PARAMS, *,
                  protocol: str = "auto") -> float:
    """`nccl_time_s` over a group of `shape` with `algorithm` forced."""
    return nccl_time_s(collective, nbytes, cluster, shape.world_size,
                       ranks_per_node=shape.ranks_per_node, algorithm=algorithm,
                       protocol=protocol, params=params)
