"""What a collective costs on a real topology, the way NCCL runs it.

A process group is a `GroupShape`: `ranks_per_node` ranks on each of `n_nodes` nodes of a
`Cluster` (the first devices filling nodes by default; HSDP's replicate group is one rank
per node, its shard group one node). Rates are achieved ones: spec x the fraction of the
link's kind (`link_constants`). Per rank, per direction:

* B_i, intra-node: `intra_node.bandwidth_GBps` x fraction;
* B_n, the network share of the group on one node: ranks_per_node x (NICs x NIC rate x
  fraction) / devices_per_node; every rank's rail is busy with its own group at once;
* B_s, NVLS: `intra_node.bandwidth_GBps` x NVLS_FRACTION, where the NVSwitch reduces.

Bandwidth time T_bw of an all-reduce of S bytes over N = m nodes x r ranks:

| algorithm | T_bw | pipeline hops (latency path L) |
|---|---|---|
| ring | 2(N-1)/N S max(1/B_i, 1/B_n) | 2(N-m) intra + 2m network |
| tree (pipelined) | max(intra stage, 2(m-1)/m S / B_n) | 2(r-1) intra + 2 log2(m) network |
| nvls (one node) | S / B_s | 2 NVSwitch passes |

The tree (hierarchical: reduce in the node, all-reduce 1/r of the data across nodes,
broadcast in the node, all three pipelined) has as intra stage the node's ring
(2(r-1)/r S / B_i) or, with NVLS, S / B_s (NCCL's NVLSTree), whose latency is one NVSwitch
pass (`NVLS_HOP_US`) instead of r-1 hops; log2 is rounded up. All-gather and
reduce-scatter are rings ((N-1)/N, half the hops), broadcast and reduce pipelined chains
(1 x S). A chunked pipeline of depth L hops costs
t = LAUNCH + (sqrt(T_bw) + sqrt(L))**2, the optimum of (hops + chunks) x (alpha + chunk/B)
over the number of chunks: alpha-beta at the two ends, a slow ramp between them.

The choice (`choose_algorithm`) imitates NCCL's tuner: among the algorithms this topology
has, the one with the smallest modelled time. A learner overrides it with `algorithm`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dpsim.collectives.limits import MAX_NBYTES
from dpsim.collectives.link_constants import (
    ACHIEVED_FRACTION,
    LAUNCH_US,
    NVLS_FRACTION,
    NVLS_FRACTIONS,
    NVLS_HOP_US,
)
from dpsim.hardware import MAX_DEVICES_PER_NODE, MAX_NODES, Cluster, Link
from dpsim.validation import require_choice, require_int, require_type

NCCL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
NCCL_ALGORITHMS = ("ring", "tree", "nvls")
ALGORITHM_CHOICES = ("auto", *NCCL_ALGORITHMS)


@dataclass(frozen=True)
class ModelParams:
    """The model's free constants (defaults: `link_constants`); the fitter varies them."""

    fractions: dict[str, float] = field(
        default_factory=lambda: {k: c.value for k, c in ACHIEVED_FRACTION.items()})
    nvls_fraction: float = NVLS_FRACTION.value  # any NVSwitch not in `nvls_fractions`
    launch_us: float = LAUNCH_US.value
    nvls_fractions: dict[str, float] = field(
        default_factory=lambda: {k: c.value for k, c in NVLS_FRACTIONS.items()})

    nvls_hop_us: dict[str, float] = field(
        default_factory=lambda: {k: c.value for k, c in NVLS_HOP_US.items()})

    def nvls(self, link: Link) -> float:
        """The NVLS fraction of the NVSwitch behind `link` (by its name)."""
        return self.nvls_fractions.get(link.name, self.nvls_fraction)

    def nvls_hop_s(self, link: Link) -> float:
        """Seconds of one pass through the NVSwitch behind `link` (else the link's hop)."""
        return self.nvls_hop_us.get(link.name, link.latency_us) * 1e-6


DEFAULT_PARAMS = ModelParams()


@dataclass(frozen=True)
class GroupShape:
    """A process group: `ranks_per_node` ranks on each of `n_nodes` nodes."""

    n_nodes: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        require_int("n_nodes", self.n_nodes, 1, MAX_NODES)
        require_int("ranks_per_node", self.ranks_per_node, 1, MAX_DEVICES_PER_NODE)

    @property
    def world_size(self) -> int:
        """Ranks in the group."""
        return self.n_nodes * self.ranks_per_node


def group_shape(cluster: Cluster, n_devices: int | None = None,
                ranks_per_node: int | None = None) -> GroupShape:
    """The group of `n_devices` ranks (default: all), `ranks_per_node` on each node
    (default: fill nodes first). HSDP's replicate group: ranks_per_node=1."""
    require_type("cluster", cluster, Cluster)
    n = cluster.world_size if n_devices is None else require_int(
        "n_devices", n_devices, 1, cluster.world_size)
    per = min(n, cluster.devices_per_node) if ranks_per_node is None else require_int(
        "ranks_per_node", ranks_per_node, 1, cluster.devices_per_node)
    if n % per or n // per > cluster.n_nodes:
        raise ValueError(f"n_devices={n} is not ranks_per_node={per} on each of at most "
                         f"{cluster.n_nodes} nodes; allowed: a multiple of {per} up to "
                         f"{per * cluster.n_nodes}")
    return GroupShape(n // per, per)


def _check(cluster: Cluster, shape: GroupShape, collective: str = "all_reduce") -> None:
    require_choice("collective", collective, NCCL_COLLECTIVES)
    require_type("cluster", cluster, Cluster)
    require_type("shape", shape, GroupShape)


def _rate(link: Link, params: ModelParams) -> float:
    """Achieved bytes/s of one link (spec x the fraction of its kind)."""
    return link.bandwidth_GBps * 1e9 * params.fractions[link.kind]


def rates(cluster: Cluster, shape: GroupShape, params: ModelParams = DEFAULT_PARAMS
          ) -> tuple[float, float, float]:
    """(B_i, B_n, B_s) in bytes/s per rank; B_n = inf on one node, B_s = 0 without NVLS."""
    _check(cluster, shape)
    b_i = _rate(cluster.intra_node, params)
    b_n = math.inf
    if shape.n_nodes > 1 and cluster.inter_node is not None:
        node = cluster.nics * _rate(cluster.inter_node, params)
        b_n = node * shape.ranks_per_node / cluster.devices_per_node
    b_s = (cluster.intra_node.bandwidth_GBps * 1e9 * params.nvls(cluster.intra_node)
           if cluster.nvls else 0.0)
    return b_i, b_n, b_s


def available(collective: str, cluster: Cluster, shape: GroupShape) -> tuple[str, ...]:
    """The algorithms NCCL has for this collective on this topology."""
    _check(cluster, shape, collective)
    if collective != "all_reduce" or shape.world_size == 1:
        return ("ring",)
    algos = ["ring"]
    if shape.n_nodes > 1:
        algos.append("tree")
    elif cluster.nvls and shape.ranks_per_node > 1:
        algos.append("nvls")
    return tuple(algos)


def _hops(cluster: Cluster, shape: GroupShape, algorithm: str, params: ModelParams
          ) -> tuple[float, float]:
    """(intra-node, network) seconds of the latency path L for one pass."""
    a_i = cluster.intra_node.latency_us * 1e-6
    a_n = cluster.inter_node.latency_us * 1e-6 if cluster.inter_node is not None else 0.0
    m, r = shape.n_nodes, shape.ranks_per_node
    if algorithm == "ring":
        crossings = m if m > 1 else 0
        return (shape.world_size - crossings) * a_i, crossings * a_n
    intra = params.nvls_hop_s(cluster.intra_node) if (cluster.nvls and r > 1) else (r - 1) * a_i
    return intra, math.ceil(math.log2(m)) * a_n if m > 1 else 0.0


def algorithm_time_s(collective: str, nbytes: int, cluster: Cluster, shape: GroupShape,
                     algorithm: str, params: ModelParams = DEFAULT_PARAMS) -> float:
    """Seconds for one collective on `nbytes` (full tensor) with `algorithm`."""
    _check(cluster, shape, collective)
    require_int("nbytes", nbytes, 0, MAX_NBYTES)
    require_choice("algorithm", algorithm, available(collective, cluster, shape))
    n, m, r = shape.world_size, shape.n_nodes, shape.ranks_per_node
    if n == 1:
        return 0.0
    b_i, b_n, b_s = rates(cluster, shape, params)
    s = float(nbytes)
    ring_share = max(1 / b_i, 1 / b_n)
    intra_l, net_l = _hops(cluster, shape, algorithm, params)
    if algorithm == "ring":
        factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}.get(
            collective, (n - 1) / n)
        t_bw = factor * s * ring_share
        passes = 2 if collective == "all_reduce" else 1
    elif algorithm == "nvls":
        t_bw, passes = s / b_s, 2
    else:  # tree: intra stage and inter-node stage pipelined
        intra = s / b_s if (cluster.nvls and r > 1) else 2 * (r - 1) / r * s / b_i
        t_bw, passes = max(intra, 2 * (m - 1) / m * s / b_n), 2
    path = passes * (intra_l + net_l)
    return params.launch_us * 1e-6 + (math.sqrt(t_bw) + math.sqrt(path)) ** 2


def choose_algorithm(collective: str, nbytes: int, cluster: Cluster, shape: GroupShape,
                     params: ModelParams = DEFAULT_PARAMS) -> str:
    """NCCL's rule, imitated: the available algorithm with the smallest modelled time."""
    _check(cluster, shape, collective)
    algos = available(collective, cluster, shape)
    times = [algorithm_time_s(collective, nbytes, cluster, shape, a, params) for a in algos]
    return algos[times.index(min(times))]


def nccl_time_s(collective: str, nbytes: int, cluster: Cluster, n_devices: int | None = None,
                *, ranks_per_node: int | None = None, algorithm: str = "auto") -> float:
    """Seconds for one NCCL collective over a group of `cluster` (see the module table).

    >>> from dpsim.hardware import get_cluster
    >>> round(nccl_time_s("all_reduce", 2**30, get_cluster("h100-ib-4")) * 1e3, 2)  # ms
    5.5
    """
    shape = group_shape(cluster, n_devices, ranks_per_node)
    require_choice("collective", collective, NCCL_COLLECTIVES)
    require_choice("algorithm", algorithm, ALGORITHM_CHOICES)
    algo = choose_algorithm(collective, nbytes, cluster, shape) if algorithm == "auto" \
        else algorithm
    return algorithm_time_s(collective, nbytes, cluster, shape, algo)


def achieved_link(link: Link) -> Link:
    """`link` at what a collective achieves: its bandwidth x the fraction of its kind, as a
    "generic" Link (used by DataParallel's copies and `ring_link`)."""
    require_type("link", link, Link)
    if link.kind == "generic":
        return link
    return Link(f"{link.name} (achieved)", _rate(link, DEFAULT_PARAMS) / 1e9, link.latency_us)


def ring_link(cluster: Cluster, n_devices: int) -> Link:
    """The achieved per-rank Link of a ring over the first `n_devices` devices (used by
    `Cluster.link_for`): bandwidth min(B_i, B_n), latency the slowest hop's."""
    require_type("cluster", cluster, Cluster)
    require_int("n_devices", n_devices, 1, cluster.world_size)
    shape = group_shape(cluster, n_devices)
    b_i, b_n, _ = rates(cluster, shape)
    crosses = shape.n_nodes > 1 and cluster.inter_node is not None
    latency = max(cluster.intra_node.latency_us,
                  cluster.inter_node.latency_us if crosses and cluster.inter_node else 0.0)
    name = cluster.intra_node.name + (f" + {cluster.nics} x {cluster.inter_node.name}"
                                      if crosses and cluster.inter_node else "")
    return Link(f"{name} (achieved)", min(b_i, b_n) / 1e9, latency)
