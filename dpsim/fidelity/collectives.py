"""nccl-tests runs against `dpsim.collectives.nccl`: fit on half the points, test on the rest.

Points alternate by size within each run: even positions train, odd positions are held
out. The free constants (achieved fraction of each network kind, NVLS fraction, launch
latency, per-hop latency of each link preset in the data) are fitted by coordinate descent
over grids, minimising the median plus a third of the worst |relative error| of the time
on the training half. Only the held-out errors are reported as the model's error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dpsim.cluster_presets import CLUSTERS
from dpsim.collectives.nccl import (
    DEFAULT_PARAMS,
    GroupShape,
    ModelParams,
    algorithm_time_s,
    choose_algorithm,
)
from dpsim.hardware import Cluster, Link

DATA = Path(__file__).with_name("data") / "nccl_tests.json"
FRACTION_GRID = np.round(np.arange(0.30, 1.001, 0.02), 2)
LATENCY_GRID_US = tuple(float(x) for x in np.round(np.concatenate(
    [[0.0], np.geomspace(0.25, 160.0, 40)]), 2))


@dataclass(frozen=True)
class Point:
    """One published row: a run's cluster and group, a size, the published time."""

    run: str
    cluster: str
    n_nodes: int
    ranks_per_node: int
    collective: str
    nbytes: int
    time_us: float
    busbw_GBps: float
    held_out: bool


def load_runs(path: Path = DATA) -> list[dict[str, Any]]:
    """The runs of the dataset, as stored (each with its source and config)."""
    runs: list[dict[str, Any]] = json.loads(path.read_text())["runs"]
    return runs


def points(runs: list[dict[str, Any]]) -> list[Point]:
    """Every row of every run; odd positions within a run are held out."""
    return [Point(r["id"], r["cluster"], r["n_nodes"], r["ranks_per_node"], r["collective"],
                  p["nbytes"], p["time_us"], p["busbw_GBps"], held_out=i % 2 == 1)
            for r in runs for i, p in enumerate(r["points"])]


def cluster_of(p: Point, links: dict[str, float]) -> Cluster:
    """The preset of a point's run, resized to its nodes, with fitted hop latencies."""
    c = CLUSTERS[p.cluster]
    inter = c.inter_node
    if inter is not None and inter.name in links:
        inter = replace(inter, latency_us=links[inter.name])
    intra: Link = replace(c.intra_node, latency_us=links.get(c.intra_node.name,
                                                             c.intra_node.latency_us))
    return replace(c, n_nodes=p.n_nodes, intra_node=intra, inter_node=inter)


def predict_us(p: Point, params: ModelParams, links: dict[str, float],
               cluster: Cluster | None = None) -> tuple[float, str]:
    """(modelled microseconds, algorithm chosen) for one point (`cluster`: its
    `cluster_of`, when the caller has built it already)."""
    c = cluster or cluster_of(p, links)
    shape = GroupShape(p.n_nodes, p.ranks_per_node)
    algo = choose_algorithm(p.collective, p.nbytes, c, shape, params)
    return algorithm_time_s(p.collective, p.nbytes, c, shape, algo, params) * 1e6, algo


def errors(pts: list[Point], params: ModelParams, links: dict[str, float]) -> np.ndarray:
    """Relative error of the modelled time, predicted / published - 1, per point."""
    clusters = {p.run: cluster_of(p, links) for p in pts}  # one per run, not per point
    return np.array([predict_us(p, params, links, clusters[p.run])[0] / p.time_us - 1
                     for p in pts])


def _score(e: np.ndarray) -> float:
    a = np.abs(e)
    return float(np.median(a) + a.max() / 3)


START_FRACTION, START_LATENCY_US = 0.8, 5.0  # where the fit starts, whatever is shipped


def link_names(pts: list[Point]) -> list[str]:
    """The link presets (by name) whose hop latency is fitted: every network, and the
    intra-node links of nodes without NVLS (on NVLS nodes NCCL runs no ring in the data)."""
    names = set()
    for p in pts:
        c = CLUSTERS[p.cluster]
        names |= {c.inter_node.name} if c.inter_node is not None else set()
        names |= set() if c.nvls else {c.intra_node.name}
    return sorted(names)


def tied_links(pts: list[Point], links: dict[str, float]) -> dict[str, float]:
    """`links` plus the ring hop of NVLS nodes' links, assumed equal to the fitted ring hop
    of an NVLink without NVLS (the mean of those fitted)."""
    fitted = [links[n] for p in pts for n in [CLUSTERS[p.cluster].intra_node.name]
              if not CLUSTERS[p.cluster].nvls and CLUSTERS[p.cluster].intra_node.kind == "nvlink"]
    hop = sum(fitted) / len(fitted) if fitted else START_LATENCY_US
    tied = {CLUSTERS[p.cluster].intra_node.name: hop for p in pts if CLUSTERS[p.cluster].nvls}
    return {**links, **tied}


def fit(pts: list[Point], rounds: int = 4) -> tuple[ModelParams, dict[str, float]]:
    """Fitted (ModelParams, hop latency per link name) on the training points given."""
    kinds = sorted({CLUSTERS[p.cluster].inter_node.kind for p in pts  # type: ignore[union-attr]
                    if CLUSTERS[p.cluster].inter_node is not None})
    switches = sorted({CLUSTERS[p.cluster].intra_node.name for p in pts
                       if CLUSTERS[p.cluster].nvls})
    params = replace(DEFAULT_PARAMS, launch_us=START_LATENCY_US,
                     fractions={**DEFAULT_PARAMS.fractions,
                                **dict.fromkeys(kinds, START_FRACTION)},
                     nvls_fractions=dict.fromkeys(switches, START_FRACTION),
                     nvls_hop_us=dict.fromkeys(switches, START_LATENCY_US))
    links = tied_links(pts, dict.fromkeys(link_names(pts), START_LATENCY_US))
    def best(candidates: Iterable[ModelParams]) -> ModelParams:
        return min(candidates, key=lambda q: _score(errors(pts, q, tied_links(pts, links))))

    for _ in range(rounds):
        for kind in kinds:
            params = best(replace(params, fractions={**params.fractions, kind: float(f)})
                          for f in FRACTION_GRID)
        for switch in switches:
            params = best(replace(params, nvls_fractions={**params.nvls_fractions,
                                                          switch: float(f)})
                          for f in FRACTION_GRID)
            params = best(replace(params, nvls_hop_us={**params.nvls_hop_us, switch: a})
                          for a in LATENCY_GRID_US)
        params = best(replace(params, launch_us=a) for a in LATENCY_GRID_US)
        for name in sorted(links):
            links = min(({**links, name: a} for a in LATENCY_GRID_US),
                        key=lambda ls: _score(errors(pts, params, tied_links(pts, ls))))
    return params, tied_links(pts, links)


def evaluate(path: Path = DATA) -> dict[str, Any]:
    """Fit on the training half, predict every point; rows, fitted constants, summary."""
    pts = points(load_runs(path))
    train = [p for p in pts if not p.held_out]
    params, links = fit(train)
    rows: list[dict[str, Any]] = []
    for p in pts:
        t, algo = predict_us(p, params, links)
        rows.append({"run": p.run, "collective": p.collective, "nbytes": p.nbytes,
                     "published_us": p.time_us, "predicted_us": round(t, 3),
                     "error": round(t / p.time_us - 1, 4), "algorithm": algo,
                     "held_out": p.held_out})
    held = np.array([abs(r["error"]) for r in rows if r["held_out"]])
    resid = np.array([abs(r["error"]) for r in rows if not r["held_out"]])
    return {"rows": rows,
            "fitted": {"fractions": {k: params.fractions[k] for k in ("efa", "roce")
                                     if k in params.fractions},
                       "nvls_fractions": params.nvls_fractions, "launch_us": params.launch_us,
                       "nvls_hop_us": params.nvls_hop_us,
                       "hop_latency_us": links},
            "held_out_median": float(np.median(held)), "held_out_worst": float(held.max()),
            "fit_residual_median": float(np.median(resid)),
            "n_points": len(rows), "n_held_out": int(held.size)}


def shipped_rows(path: Path = DATA) -> list[dict[str, Any]]:
    """Every published point beside the model with the constants dpsim ships (no fit here:
    they are the fit `evaluate` reproduces), with its held-out flag."""
    pts = points(load_runs(path))
    rows: list[dict[str, Any]] = []
    for p in pts:
        c = replace(CLUSTERS[p.cluster], n_nodes=p.n_nodes)
        t, algo = predict_us(p, DEFAULT_PARAMS, {}, c)
        rows.append({"run": p.run, "nbytes": p.nbytes, "published_us": p.time_us,
                     "predicted_us": round(t, 3), "error": round(t / p.time_us - 1, 4),
                     "algorithm": algo, "held_out": p.held_out})
    return rows


def held_out_summary(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per run: (median, worst) |error| over its held-out points."""
    out: dict[str, tuple[float, float]] = {}
    for run in dict.fromkeys(r["run"] for r in rows):
        errs = [abs(r["error"]) for r in rows if r["run"] == run and r["held_out"]]
        out[run] = (float(np.median(errs)), max(errs))
    return out
