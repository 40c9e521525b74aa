"""The one answer to "what does this collective cost" and "which link does this group see".

`group_time_s` is the seconds of one collective over a process group of a Cluster: what
every strategy and the planner pay. `group_link` is the achieved per-rank link a group sees
(for the closed forms, the planner's crossover), `achieved_link` the same for one lone link
(DataParallel's copies). `collectives.cost` keeps the textbook alpha-beta closed form (one
link, chapter 2) and `collectives.nccl` NCCL's own model (any group, algorithm, protocol),
which this module dispatches to.

A process group is a `GroupShape` (`collectives.nccl`): `ranks_per_node` ranks on each of
`n_nodes` nodes. DDP, DP, FSDP and ZeRO-1/2 use the whole cluster, nodes filled first;
HSDP's 2-D mesh (replicate x shard) has two groups, `mesh_shapes`: the shard group is F
ranks of one node (or F / devices_per_node whole nodes), the replicate group the ranks at
the same position of every shard group, one per node when F fills a node.

Two models, chosen by the links the group crosses (`uses_nccl`):

* GPU links (every kind but "generic" and "shared_memory"): NCCL as `collectives.nccl`
  models it (ring, pipelined tree, NVLS), with the algorithm the config asks for:
  "auto" is NCCL's choice; "ring", "tree" and "nvls" force it where NCCL has it for this
  collective on this group (NCCL runs all-gather and reduce-scatter as rings, and this
  model has a tree only across nodes and NVLS only inside an NVSwitch node), else the ring;
  "naive" (no NCCL algorithm) is the textbook closed form on the group's achieved link.
* "generic" links (this machine's CPU and gloo, calibrated by
  `dpsim.runtime.link_calibration`; any Link built by hand): the closed forms of
  `collectives.cost` on the group's link, "auto" being the ring; chapters 1-5 predict as
  before.

A fabric that is not rail-optimized (`Cluster.rail_optimized=False`) sends a ring's
inter-node hops over the spine: `fabric_cluster` adds the extra switch traversals of
`link_constants.SPINE_EXTRA_SWITCH_HOPS` x `SWITCH_HOP_US` to the network link's latency.
No bandwidth penalty is modelled (see `link_constants`). Results are cached per
(collective, bytes, cluster, shape, algorithm): the model is pure.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from dpsim.sim.collectives.cost import collective_time_s
from dpsim.sim.collectives.link_constants import SPINE_EXTRA_SWITCH_HOPS, SWITCH_HOP_US
from dpsim.sim.collectives.nccl import (
    GroupShape,
    available,
    choose,
    nccl_time_s,
    rates,
)
from dpsim.sim.collectives.params import DEFAULT_PARAMS
from dpsim.sim.hardware import Cluster, Link

GROUP_ALGORITHMS = ("auto", "ring", "tree", "nvls", "naive")
CLOSED_FORM_KINDS = ("generic", "shared_memory")  # numbers already achieved: no NCCL model
_CACHE_SIZE = 1 << 14


def uses_nccl(cluster: Cluster, shape: GroupShape) -> bool:
    """Whether a group of this shape crosses a GPU link (then NCCL's model applies)."""
    links = [cluster.intra_node] if shape.ranks_per_node > 1 or shape.n_nodes == 1 else []
    if shape.n_nodes > 1 and cluster.inter_node is not None:
        links.append(cluster.inter_node)
    return any(link.kind not in CLOSED_FORM_KINDS for link in links)


def fabric_cluster(cluster: Cluster) -> Cluster:
    """`cluster` with its network link as a ring's inter-node hop sees it: on a fabric that
    is not rail-optimized each hop crosses the spine (extra switch traversals of latency)."""
    net = cluster.inter_node
    if cluster.rail_optimized or net is None or cluster.n_nodes == 1:
        return cluster
    extra_us = SPINE_EXTRA_SWITCH_HOPS.value * SWITCH_HOP_US.value
    return replace(cluster, inter_node=replace(net, latency_us=net.latency_us + extra_us))


def achieved_link(link: Link) -> Link:
    """`link` at what a collective achieves: its bandwidth x the fraction of its kind, as a
    "generic" Link (a lone link: DataParallel's copies, the explorer's presets)."""
    if link.kind == "generic":
        return link
    rate = link.bandwidth_GBps * 1e9 * DEFAULT_PARAMS.fraction(link)  # bytes/s
    return Link(f"{link.name} (achieved)", rate / 1e9, link.latency_us)


def group_link(cluster: Cluster, shape: GroupShape) -> Link:
    """The achieved per-rank Link of a ring over the group: bandwidth min(B_i, B_n) (NCCL's
    rates, the network's share of this group's ranks on a node), latency the slowest hop's
    (with the spine's on a fabric that is not rail-optimized). For the closed forms.

    >>> from dpsim.sim.collectives.nccl import group_shape
    >>> from dpsim.sim.hardware import get_cluster
    >>> c = get_cluster("h100-ib-4")
    >>> round(group_link(c, group_shape(c, 8)).bandwidth_GBps)  # one node: NVLink, GB/s
    369
    """
    fabric = fabric_cluster(cluster)
    b_i, b_n, _ = rates(fabric, shape)
    net = fabric.inter_node if shape.n_nodes > 1 else None
    latency = max(fabric.intra_node.latency_us, net.latency_us if net else 0.0)
    name = fabric.intra_node.name + (f" + {fabric.nics} x {net.name}" if net else "")
    return Link(f"{name} (achieved)", min(b_i, b_n) / 1e9, latency)


def _nccl_algorithm(collective: str, algorithm: str, cluster: Cluster, shape: GroupShape,
                    nbytes: int) -> str:
    """The NCCL algorithm a config's `algorithm` runs as on this group (module docstring)."""
    if algorithm == "auto":
        return choose(collective, nbytes, cluster, shape)[0]
    return algorithm if algorithm in available(collective, cluster, shape) else "ring"


def group_time_s(collective: str, nbytes: int, cluster: Cluster, shape: GroupShape,
                 algorithm: str = "auto") -> float:
    """Seconds for one collective on `nbytes` (the full tensor) over a group of `shape`.

    >>> from dpsim.sim.collectives.nccl import group_shape
    >>> from dpsim.sim.hardware import get_cluster
    >>> c = get_cluster("h100-ib-4")
    >>> round(group_time_s("all_reduce", 2**30, c, group_shape(c)) * 1e3, 2)  # ms
    5.5
    """
    return _cached(collective, nbytes, cluster, shape, algorithm)


@lru_cache(maxsize=_CACHE_SIZE)
def _cached(collective: str, nbytes: int, cluster: Cluster, shape: GroupShape,
            algorithm: str) -> float:
    """`group_time_s`, cached (Cluster, Link and GroupShape are frozen)."""
    if shape.world_size == 1:
        return 0.0
    if algorithm == "naive" or not uses_nccl(cluster, shape):
        closed = "ring" if algorithm in ("auto", "nvls") else algorithm
        return collective_time_s(collective, nbytes, shape.world_size,
                                 group_link(cluster, shape), closed)
    # the NCCL model adds the spine's hops itself (`nccl._spine_us`)
    algo = "auto" if algorithm == "auto" else _nccl_algorithm(collective, algorithm, cluster,
                                                              shape, nbytes)
    return nccl_time_s(collective, nbytes, cluster, shape.world_size,
                       ranks_per_node=shape.ranks_per_node, algorithm=algo)


def mesh_shapes(cluster: Cluster, shard_size: int) -> tuple[GroupShape, GroupShape]:
    """(shard group, replicate group) of a 2-D mesh (replicate x shard, rank = r*F + f)
    over every device of `cluster`; F must divide the world size.

    Shard group: F ranks of one node, or F / devices_per_node whole nodes. Replicate group:
    the W / F ranks with the same f, devices_per_node / F of them on each node when F
    divides a node (one per node when F is a node or more). A shard group that straddles
    two nodes (F below a node but not dividing it) is costed as F ranks of one node, its
    replicate group packed onto as few ranks per node as fit the nodes (HSDP's config has
    checked that F divides the world and fills whole nodes when above one).
    """
    w, d = cluster.world_size, cluster.devices_per_node
    f = shard_size
    r = w // f
    shard = GroupShape(1, f) if f <= d else GroupShape(f // d, d)
    per = d // f if f <= d and d % f == 0 else 1
    per = min(per, r)
    while r % per or r // per > cluster.n_nodes:
        per += 1  # a replicate group that cannot spread over the nodes packs them tighter
    return shard, GroupShape(r // per, per)
