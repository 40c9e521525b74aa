"""The crossover: the device count N* at which communication stops hiding.

A strategy's `CrossoverTerms` (k model-sized transfers, A latencies per extra device)
and the compute it hides behind (c0 + c*G/N on each of N devices) meet where
c0 + c*G/N = k*S/B + A*alpha*N (`crossover_formula`, the textbook ring on one link: the
closed form the strategies pay on generic links). On GPU links the strategies pay NCCL's
costs (`collectives.group_cost`), so `topology_crossover` re-derives it with them:
c0 + c*G/N = C*t_N(k*S/(m*C)): the step's C collectives (buckets; 3 per FSDP unit), each
moving m model sizes (2 for an all-reduce, 1 for an all-gather), of equal size, each costing
t_N what NCCL's model says over N devices: its launch, k*S/B(N) in all with B(N) the
achieved ring rate (NVLink in a node, the node's NICs beyond), and the latency path of the
algorithm NCCL picks (a tree's grows as log2 of the nodes, a ring's as N), pipelined with
the bytes. On one link with the textbook ring, C*t_N is k*S/B*(N-1)/N + A*alpha*(N-1): the
closed form. `planner.crossover` puts N* next to the simulated one.
"""

from __future__ import annotations

import math

from dpsim.sim.collectives.group_cost import group_link, group_time_s
from dpsim.sim.collectives.nccl import group_shape
from dpsim.sim.hardware import Cluster, Link
from dpsim.sim.limits import MAX_EXACT_COUNT, MAX_NODES
from dpsim.sim.strategies.base import LATENCIES_PER_COLLECTIVE, CrossoverTerms


def crossover_formula(c_s: float, global_batch: int, k: float, model_bytes: int,
                      alpha_terms: int, link: Link, c0_s: float = 0.0) -> float:
    """Solve c0 + c*G/N = k*S/B + A*alpha*N for N (ring collectives, (N-1)/N ~ 1):
    A*alpha*N^2 + (k*S/B - c0)*N - c*G = 0.

    With c0 = 0 and alpha = 0 it is N* = c*G*B/(k*S): the devices at which the compute per
    device, shrinking as 1/N, falls to the fixed time of moving k copies of the model.
    ValueError when no N solves it: no latency term and c0 covers the whole transfer.
    Trusts its inputs (bounded as in `limits`: c_s and c0_s up to MAX_COMPUTE_S, k up to
    MAX_TRANSFERS, model_bytes up to MAX_EXACT_COUNT, alpha_terms up to MAX_ALPHA_TERMS).
    """
    n_star = solve_crossover(c_s, global_batch, k, model_bytes, alpha_terms, link, c0_s)
    if n_star is not None:
        return n_star
    transfer_s = k * model_bytes / (link.bandwidth_GBps * 1e9)
    if model_bytes == 0:
        raise ValueError("model_bytes=0 leaves nothing to send and alpha_terms * "
                         "link.latency_us = 0, so no N solves the formula; allowed: "
                         "model_bytes >= 1 or a latency term")
    raise ValueError(f"c0_s={c0_s!r} covers the whole transfer k*S/B = {transfer_s:.6g} s at "
                     "every N and alpha_terms * link.latency_us = 0, so no N solves the "
                     f"formula; allowed < {transfer_s:.6g}")


def solve_crossover(c_s: float, global_batch: int, k: float, model_bytes: int,
                    alpha_terms: int, link: Link, c0_s: float) -> float | None:
    """N* >= 0 of the crossover formula; None when none exists (see `crossover_formula`)."""
    beta_s = k * model_bytes / (link.bandwidth_GBps * 1e9) - c0_s
    a_s = alpha_terms * link.latency_us * 1e-6
    cg = c_s * global_batch
    if not (math.isfinite(beta_s) and math.isfinite(a_s)):
        n_star = math.inf
    elif a_s == 0:
        if beta_s <= 0:
            return None
        n_star = cg / beta_s
    elif abs(beta_s) < 1e150:  # beta_s**2 stays a float
        n_star = max(0.0, (-beta_s + math.sqrt(beta_s**2 + 4 * a_s * cg)) / (2 * a_s))
    else:
        n_star = max(0.0, (-beta_s + math.hypot(beta_s, 2 * math.sqrt(a_s * cg))) / (2 * a_s))
    if not math.isfinite(n_star):
        raise ValueError(f"link={link!r} gives N* = {n_star!r}; allowed: a link whose "
                         "bandwidth_GBps and latency_us give a finite N*")
    return n_star


def _topology_gap_s(c_s: float, global_batch: int, k: float, model_bytes: int,
                    terms: CrossoverTerms, cluster: Cluster, n: int, c0_s: float
                    ) -> tuple[float, Link]:
    """(cover - communication) in seconds at `n` devices, and the group's link there."""
    sized = cluster.with_devices(n)
    shape = group_shape(sized)
    calls = max(1, terms.collectives)
    per_call = LATENCIES_PER_COLLECTIVE[terms.collective]  # model transfers of one call
    nbytes = min(MAX_EXACT_COUNT, round(k * model_bytes / (per_call * calls)))
    comm = calls * group_time_s(terms.collective, nbytes, sized, shape)
    return c0_s + c_s * global_batch / n - comm, group_link(sized, shape)


def topology_crossover(c_s: float, global_batch: int, k: float, model_bytes: int,
                       terms: CrossoverTerms, cluster: Cluster, c0_s: float = 0.0
                       ) -> tuple[float, Link] | None:
    """(N*, the link at N*) solving c0 + c*G/N = C*t_N(k*S/(m*C)) (module docstring) over
    the counts `cluster`'s kind of node allows (1..a node, then whole nodes), N* linear
    between the last count whose compute still covers and the first that does not. None:
    the compute covers at every count up to MAX_NODES nodes. Trusts its inputs: the
    planner's `crossover` derives them from the arguments it checked."""
    d = cluster.devices_per_node
    counts = [*range(1, d + 1), *(d * m for m in range(2, MAX_NODES + 1))]

    def gap(i: int) -> tuple[float, Link]:
        return _topology_gap_s(c_s, global_batch, k, model_bytes, terms, cluster,
                               counts[i], c0_s)

    lo, hi = 0, len(counts) - 1  # the gap falls with N: find the first count at or below 0
    if gap(hi)[0] > 0:
        return None
    first, link = gap(0)
    if first <= 0:
        return float(counts[0]), link
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if gap(mid)[0] > 0 else (lo, mid)
    g_lo, _ = gap(lo)
    g_hi, link = gap(hi)
    n_lo, n_hi = counts[lo], counts[hi]
    return n_lo + (n_hi - n_lo) * g_lo / (g_lo - g_hi), link
