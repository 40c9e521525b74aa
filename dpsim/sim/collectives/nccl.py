"""What a collective costs on a real topology, the way NCCL runs it.

A process group is a `GroupShape`: `ranks_per_node` ranks on each of `n_nodes` nodes of a
`Cluster` (the first devices filling nodes by default; HSDP's replicate group is one rank
per node, its shard group one node). Rates are achieved ones: spec x the fraction of the
link's kind (`link_constants`). Per rank, per direction:

* B_i, intra-node: `intra_node.bandwidth_GBps` x fraction;
* B_n, the network share of the group on one node: ranks_per_node x (NICs x NIC rate x
  fraction) / devices_per_node; every rank's rail is busy with its own group at once;
* B_s, NVLS: `intra_node.bandwidth_GBps` x NVLS_FRACTION, where the NVSwitch reduces.

Bandwidth time T_bw of an all-reduce of S bytes over N = m nodes x r ranks (Simple):

| algorithm | T_bw |
|---|---|
| ring | 2(N-1)/N S max(1/B_i, 1/B_n) |
| tree (pipelined) | max(intra stage, 2(m-1)/m S / B_n) |
| nvls (one node) | S / B_s |

The tree (hierarchical: reduce in the node, all-reduce 1/r of the data across nodes,
broadcast in the node, all three pipelined) has as intra stage the node's chain
(2(r-1)/r S / B_i) or, with NVLS and Simple, S / B_s (NCCL's NVLSTree). All-gather and
reduce-scatter are rings ((N-1)/N) or, inside one NVLS node, NVLS ((N-1)/N S / B_s);
broadcast and reduce pipelined chains (1 x S).

Each algorithm runs with one of NCCL's protocols (`protocols`): LL, LL128 or Simple. A
pair (algorithm, protocol) takes t = LAUNCH + latency + T_bw / factor, NCCL's own form:
`factor` is NCCL's bandwidth factor of the protocol (LL 0.5 on a ring, 1/3.8 on a tree;
LL128 0.92 or 120/128; Simple 1), `latency` NCCL's formula (base latency + its per-hop
latencies x the algorithm's steps, e.g. a ring all-reduce's 2(N-1) steps, a tree's
2((r-1) intra + log2(m) network)) with the network's own latency (fitted) added to each
network step; across nodes LL is also capped at a per-node rate (NCCL's llMaxBw; the value
fitted per network). A tree all-reduce's bandwidth is multiplied by NCCL's own per-size
correction (treeCorrectionFactor: 0.4-1 between 64 B and 256 MiB, "trees are not
perfectly sticking to the model for medium sizes").

The choice (`choose`) is NCCL's rule (src/enqueue.cc topoGetAlgoInfo over
ncclTopoGetAlgoTime, src/graph/tuning.cc): among the enabled (algorithm, protocol) pairs,
the one with the smallest time. Enabled as in NCCL: ring always; tree for an all-reduce
across nodes; NVLS inside one NVLS node (all-reduce, all-gather, reduce-scatter); LL128
only over NVLink; NVLS and NVLSTree only with Simple. The time compared is dpsim's (NCCL's
latencies, dpsim's fitted bandwidths); NCCL's own estimate also uses the channel counts
and speeds its topology search finds and a per-size tree correction, which dpsim does not
model, so near a switch point the two can pick differently. A learner overrides the choice
with `algorithm` and `protocol`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from dpsim.sim.checks import Int, OneOf, check_fields, require_choice
from dpsim.sim.collectives.link_constants import SPINE_EXTRA_SWITCH_HOPS, SWITCH_HOP_US
from dpsim.sim.collectives.params import DEFAULT_PARAMS, ModelParams
from dpsim.sim.collectives.protocols import (
    PROTOCOL_CHOICES,
    bandwidth_factor,
    nccl_latency_us,
    protocols_for,
    tree_correction,
)
from dpsim.sim.hardware import Cluster, Link
from dpsim.sim.limits import MAX_DEVICES_PER_NODE, MAX_NODES, NBytes, WorldSize

NCCL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
NCCL_ALGORITHMS = ("ring", "tree", "nvls")
ALGORITHM_CHOICES = ("auto", *NCCL_ALGORITHMS)
RanksPerNode = Annotated[int, Int(1, MAX_DEVICES_PER_NODE)]
NcclCollective = Annotated[str, OneOf(NCCL_COLLECTIVES)]
Protocol = Annotated[str, OneOf(PROTOCOL_CHOICES)]


@dataclass(frozen=True)
class GroupShape:
    """A process group: `ranks_per_node` ranks on each of `n_nodes` nodes."""

    n_nodes: Annotated[int, Int(1, MAX_NODES)]
    ranks_per_node: RanksPerNode

    def __post_init__(self) -> None:
        if (type(self.n_nodes) is int and 1 <= self.n_nodes <= MAX_NODES
                and type(self.ranks_per_node) is int
                and 1 <= self.ranks_per_node <= MAX_DEVICES_PER_NODE):
            return  # the common case (every simulation builds its groups)
        check_fields(self)

    @property
    def world_size(self) -> int:
        """Ranks in the group."""
        return self.n_nodes * self.ranks_per_node


def group_shape(cluster: Cluster, n_devices: WorldSize | None = None,
                ranks_per_node: RanksPerNode | None = None) -> GroupShape:
    """The group of `n_devices` ranks (default: all), `ranks_per_node` on each node
    (default: fill nodes first). HSDP's replicate group: ranks_per_node=1."""
    n = cluster.world_size if n_devices is None else n_devices
    per = min(n, cluster.devices_per_node) if ranks_per_node is None else ranks_per_node
    for field, value, most in (("n_devices", n, cluster.world_size),
                               ("ranks_per_node", per, cluster.devices_per_node)):
        if value > most:
            raise ValueError(f"{field}={value!r} is out of range; allowed >= 1 and <= {most} "
                             f"(cluster {cluster.name!r})")
    if n % per or n // per > cluster.n_nodes:
        raise ValueError(f"n_devices={n} is not ranks_per_node={per} on each of at most "
                         f"{cluster.n_nodes} nodes; allowed: a multiple of {per} up to "
                         f"{per * cluster.n_nodes}")
    return GroupShape(n // per, per)


def _rate(link: Link, params: ModelParams) -> float:
    """Achieved bytes/s of one link (spec x the fraction of its kind)."""
    return link.bandwidth_GBps * 1e9 * params.fraction(link)


def rates(cluster: Cluster, shape: GroupShape, params: ModelParams = DEFAULT_PARAMS
          ) -> tuple[float, float, float]:
    """(B_i, B_n, B_s) in bytes/s per rank; B_n = inf on one node, B_s = 0 without NVLS."""
    b_i = _rate(cluster.intra_node, params)
    b_n = math.inf
    if shape.n_nodes > 1 and cluster.inter_node is not None:
        node = cluster.nics * _rate(cluster.inter_node, params)
        b_n = node * shape.ranks_per_node / cluster.devices_per_node
    b_s = (cluster.intra_node.bandwidth_GBps * 1e9 * params.nvls(cluster.intra_node)
           if cluster.nvls else 0.0)
    return b_i, b_n, b_s


def available(collective: str, cluster: Cluster, shape: GroupShape) -> tuple[str, ...]:
    """The algorithms NCCL has for this collective on this topology: ring always; tree for
    an all-reduce across nodes; NVLS for an all-reduce, all-gather or reduce-scatter inside
    one NVLS node (across nodes NCCL's NVLS needs CollNet, tuning.cc line 484)."""
    if shape.world_size == 1 or collective in ("broadcast", "reduce"):
        return ("ring",)
    algos = ["ring"]
    if shape.n_nodes > 1 and collective == "all_reduce":
        algos.append("tree")
    elif shape.n_nodes == 1 and cluster.nvls and shape.ranks_per_node > 1:
        algos.append("nvls")
    return tuple(algos)


def _nvls_intra(cluster: Cluster, shape: GroupShape, protocol: str) -> bool:
    """Whether the node's part runs on the NVSwitch (NVLS, NVLSTree: Simple only)."""
    return cluster.nvls and shape.ranks_per_node > 1 and protocol == "Simple"


def time_terms(collective: str, cluster: Cluster, shape: GroupShape, algorithm: str,
               protocol: str, params: ModelParams = DEFAULT_PARAMS) -> tuple[float, float]:
    """(latency s, s per byte) of one (algorithm, protocol): a collective of S bytes takes
    latency + S x (s per byte) seconds, NCCL's own form."""
    n, m, r = shape.world_size, shape.n_nodes, shape.ranks_per_node
    b_i, b_n, b_s = rates(cluster, shape, params)
    if algorithm == "ring":
        factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}.get(
            collective, (n - 1) / n)
        k = factor * max(1 / b_i, 1 / b_n)
    elif algorithm == "nvls":
        k = (1.0 if collective == "all_reduce" else (n - 1) / n) / b_s
    else:  # tree: intra stage and inter-node stage pipelined
        intra = 1 / b_s if _nvls_intra(cluster, shape, protocol) else 2 * (r - 1) / r / b_i
        k = max(intra, 2 * (m - 1) / m / b_n)
    k /= bandwidth_factor(algorithm, protocol)
    if protocol == "LL" and m > 1:  # NCCL's llMaxBw: LL's own cap across nodes
        k = max(k, 2 * (m - 1) / m / params.ll_cap(cluster.inter_node))
    net_us = params.net_us(cluster.inter_node) + _spine_us(cluster) if m > 1 else 0.0
    latency = nccl_latency_us(collective, cluster, m, r, algorithm, protocol, net_us)
    return (params.launch_us + latency) * 1e-6, k


def _pair_time_s(collective: str, s: float, cluster: Cluster, shape: GroupShape,
                 algorithm: str, protocol: str, params: ModelParams) -> float:
    latency, per_byte = time_terms(collective, cluster, shape, algorithm, protocol, params)
    nvls_node = cluster.nvls and shape.ranks_per_node > 1
    return latency + s * per_byte / tree_correction(collective, algorithm, protocol, int(s),
                                                    nvls_node) \
        + params.fill_s(bottleneck(cluster, shape), s)


def bottleneck(cluster: Cluster, shape: GroupShape) -> Link:
    """The link whose fill term a group's collectives pay: the network across nodes, else
    the node's own fabric."""
    if shape.n_nodes > 1 and cluster.inter_node is not None:
        return cluster.inter_node
    return cluster.intra_node


def pairs(collective: str, cluster: Cluster, shape: GroupShape,
          protocol: str = "auto") -> list[tuple[str, str]]:
    """The enabled (algorithm, protocol) pairs, in NCCL's order (`protocol`: only those)."""
    return [(a, p) for a in available(collective, cluster, shape)
            for p in protocols_for(a, cluster) if protocol in ("auto", p)]


def _algorithm_time_s(collective: str, nbytes: int, cluster: Cluster, shape: GroupShape,
                      algorithm: str, protocol: str, params: ModelParams) -> float:
    """Seconds with `algorithm` and `protocol` ("auto": the protocol of that algorithm with
    the smallest modelled time; else one of `protocols_for(algorithm, cluster)`)."""
    protos = protocols_for(algorithm, cluster) if protocol == "auto" else (protocol,)
    if shape.world_size == 1:
        return 0.0
    return min(_pair_time_s(collective, float(nbytes), cluster, shape, algorithm, p, params)
               for p in protos)


def choose(collective: NcclCollective, nbytes: NBytes, cluster: Cluster, shape: GroupShape,
           params: ModelParams = DEFAULT_PARAMS, *, protocol: Protocol = "auto"
           ) -> tuple[str, str, float]:
    """(algorithm, protocol, seconds) by NCCL's rule: the enabled pair with the smallest
    modelled time (ties: the first in NCCL's order, ring before tree before NVLS, LL before
    LL128 before Simple); `protocol`: choose among that protocol's pairs only."""
    options = pairs(collective, cluster, shape, protocol)
    if not options:
        runs = sorted({p for _, p in pairs(collective, cluster, shape, "auto")})
        raise ValueError(f"protocol={protocol!r} runs no algorithm of {collective} here; "
                         f"allowed: {runs}")
    if shape.world_size == 1:
        return (*options[-1], 0.0)
    times = [_pair_time_s(collective, float(nbytes), cluster, shape, a, p, params)
             for a, p in options]
    i = times.index(min(times))
    return (*options[i], times[i])


def nccl_time_s(collective: NcclCollective, nbytes: NBytes, cluster: Cluster,
                n_devices: WorldSize | None = None, *,
                ranks_per_node: RanksPerNode | None = None,
                algorithm: Annotated[str, OneOf(ALGORITHM_CHOICES)] = "auto",
                protocol: Protocol = "auto", params: ModelParams = DEFAULT_PARAMS) -> float:
    """Seconds for one NCCL collective over a group of `cluster` (see the module table):
    `algorithm` and `protocol` "auto" are NCCL's choice (`choose`), else forced where this
    collective has them on this group; `params` the model's constants (default: fitted).

    >>> from dpsim.sim.hardware import get_cluster
    >>> round(nccl_time_s("all_reduce", 2**30, get_cluster("h100-ib-4")) * 1e3, 2)  # ms
    6.23
    >>> ib4 = get_cluster("h100-ib-4")
    >>> nccl_time_s("all_reduce", 8, ib4, protocol="Simple") > nccl_time_s("all_reduce", 8, ib4)
    True
    """
    shape = group_shape(cluster, n_devices, ranks_per_node)
    if algorithm == "auto":
        return choose(collective, nbytes, cluster, shape, params, protocol=protocol)[2]
    # what this collective runs on this group
    require_choice("algorithm", algorithm, available(collective, cluster, shape))
    if protocol != "auto":
        require_choice("protocol", protocol, protocols_for(algorithm, cluster))
    return _algorithm_time_s(collective, nbytes, cluster, shape, algorithm, protocol, params)


def _spine_us(cluster: Cluster) -> float:
    """Extra microseconds per network step of a fabric that is not rail-optimized: its hops
    cross the spine (extra switch traversals); 0 on a rail-optimized fabric."""
    if cluster.rail_optimized:
        return 0.0
    return SPINE_EXTRA_SWITCH_HOPS.value * SWITCH_HOP_US.value
