"""nccl-tests runs against `dpsim.sim.collectives.nccl`: fit on half the points, test on the rest.

The runs are every `data/nccl_tests*.json` file. Points alternate by size within each run:
even positions train, odd positions are held out. The free constants (achieved fraction,
LL cap and own latency of each network link, NVLS fraction of each NVSwitch, launch
latency, the fill term of each bottleneck link: `dpsim.sim.collectives.params`) are fitted by
coordinate descent over grids, minimising the mean |relative error| of the time on the
training half. Only the held-out errors are reported as the model's error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from dpsim.sim.collectives.link_constants import PROTOCOLS
from dpsim.sim.collectives.nccl import (
    DEFAULT_PARAMS,
    NCCL_ALGORITHMS,
    GroupShape,
    ModelParams,
    bottleneck,
    pairs,
    time_terms,
)
from dpsim.sim.collectives.protocols import tree_correction
from dpsim.sim.hardware import Cluster
from dpsim.sim.hardware.presets import CLUSTERS

DATA_DIR = Path(__file__).with_name("data")
DATA = DATA_DIR / "nccl_tests.json"
FRACTION_GRID = np.round(np.arange(0.30, 1.001, 0.02), 2)
LL_GRID_GBPS = tuple(float(x) for x in np.round(np.geomspace(0.25, 256.0, 31), 3))
LATENCY_GRID_US = tuple(float(x) for x in np.round(np.concatenate(
    [[0.0], np.geomspace(0.25, 160.0, 40)]), 2))
FILL_GRID_US = tuple(float(x) for x in np.round(np.concatenate(
    [[0.0], np.geomspace(2.0, 2048.0, 31)]), 2))
FILL_GRID_BYTES = tuple(float(2 ** k) for k in range(16, 31))  # 64 KiB - 1 GiB


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
    forced: tuple[str, str] = ("auto", "auto")  # the run's NCCL_ALGO, NCCL_PROTO (lowered)


def data_files() -> list[Path]:
    """Every shipped file of nccl-tests runs (`data/nccl_tests*.json`), sorted."""
    return sorted(DATA_DIR.glob("nccl_tests*.json"))


def load_runs(paths: Path | Iterable[Path] | None = None) -> list[dict[str, Any]]:
    """The runs of `paths` (default: every `data_files()`), as stored (each with its source
    and config)."""
    files = data_files() if paths is None else [paths] if isinstance(paths, Path) \
        else list(paths)
    runs: list[dict[str, Any]] = []
    for f in files:
        runs += json.loads(f.read_text())["runs"]
    return runs


def forced(config: str) -> tuple[str, str]:
    """(algorithm, protocol) a run's configuration forces with NCCL_ALGO / NCCL_PROTO (one
    value each; "auto" where it sets none): NCCL then runs only that, and so does dpsim."""
    out = []
    for var, names in (("NCCL_ALGO", NCCL_ALGORITHMS), ("NCCL_PROTO", PROTOCOLS)):
        m = re.search(rf"{var}=([A-Za-z0-9]+)\b(?!,)", config)
        by_lower = {n.lower(): n for n in names}
        out.append(by_lower.get(m.group(1).lower(), "auto") if m else "auto")
    return out[0], out[1]


def dpsim_nbytes(collective: str, size_column: int) -> int:
    """dpsim's `nbytes` (the full, unsharded tensor; `nccl_time_s`) of a row whose nccl-tests
    size column is `size_column` bytes.

    nccl-tests prints max(send, receive) bytes (src/common.cu, writeBenchmarkLinePreamble)
    and algbw = size / time: the all-reduced buffer; the all-gather's whole output
    (N x sendcount); the reduce-scatter's whole input (N x recvcount, `count` column =
    recvcount; src/reduce_scatter.cu, ReduceScatterGetCollByteCount and GetBw). Each is the
    full tensor, so the bytes carry over unchanged; nccl-tests before June 2020 printed a
    reduce-scatter algbw of (N-1) x recvcount / time, which the rows' arithmetic check
    (algbw = size / time) rejects."""
    if collective not in ("all_reduce", "all_gather", "reduce_scatter"):
        raise ValueError(f"collective={collective!r} has no nccl-tests byte convention here; "
                         "allowed: all_reduce, all_gather, reduce_scatter")
    if isinstance(size_column, bool) or not isinstance(size_column, int) or size_column < 0:
        raise ValueError(f"size_column={size_column!r} must be a byte count >= 0")
    return size_column


def points(runs: list[dict[str, Any]]) -> list[Point]:
    """Every row of every run; odd positions within a run are held out."""
    return [Point(r["id"], r["cluster"], r["n_nodes"], r["ranks_per_node"], r["collective"],
                  dpsim_nbytes(r["collective"], p["nbytes"]), p["time_us"], p["busbw_GBps"],
                  held_out=i % 2 == 1, forced=forced(r.get("config", "")))
            for r in runs for i, p in enumerate(r["points"])]


def cluster_of(p: Point) -> Cluster:
    """The preset of a point's run, resized to its nodes."""
    return replace(CLUSTERS[p.cluster], n_nodes=p.n_nodes)


def run_predictions(pts: Sequence[Point], params: ModelParams = DEFAULT_PARAMS
                    ) -> tuple[np.ndarray, list[str]]:
    """Modelled microseconds and chosen "algorithm/protocol" of points of one run (one
    cluster, group and collective), all sizes at once: the smallest time over the pairs."""
    cluster = cluster_of(pts[0])
    shape = GroupShape(pts[0].n_nodes, pts[0].ranks_per_node)
    algo, proto = pts[0].forced
    options = [(a, q) for a, q in pairs(pts[0].collective, cluster, shape, proto)
               if algo in ("auto", a)]
    s = np.array([float(p.nbytes) for p in pts])
    nvls_node = cluster.nvls and shape.ranks_per_node > 1
    times = np.empty((len(options), s.size))
    for i, (a, proto) in enumerate(options):
        latency, per_byte = time_terms(pts[0].collective, cluster, shape, a, proto, params)
        times[i] = latency + per_byte * s
        if a == "tree":  # NCCL's per-size correction of a tree's bandwidth
            sizes = tuple(p.nbytes for p in pts)
            times[i] += per_byte * s * (1 / _corrections(sizes, proto, nvls_node) - 1)
    best = times.argmin(axis=0)  # first of equal times: NCCL's order, as `choose`
    fill = params.fill_s(bottleneck(cluster, shape), s)  # the same for every pair
    return (times.min(axis=0) + fill) * 1e6, [f"{options[j][0]}/{options[j][1]}" for j in best]


@cache
def _corrections(sizes: tuple[int, ...], protocol: str, nvls_node: bool) -> np.ndarray:
    """NCCL's tree correction of an all-reduce at each size (see `tree_correction`)."""
    return np.array([tree_correction("all_reduce", "tree", protocol, n, nvls_node)
                     for n in sizes])


def _uses(p: Point, params: ModelParams) -> tuple[Any, ...]:
    """Every constant of `params` the model reads for `p`'s run (the key of a cached run)."""
    c = CLUSTERS[p.cluster]
    inter = c.inter_node if p.n_nodes > 1 else None
    link = link_of(p)
    return (p.run, params.launch_us, params.fraction(c.intra_node), params.nvls(c.intra_node),
            None if inter is None else params.fraction(inter), params.ll_cap(inter),
            params.net_us(inter), params.fill_us.get(link), params.fill_bytes.get(link))


def errors(pts: list[Point], params: ModelParams,
           memo: dict[tuple[Any, ...], np.ndarray] | None = None) -> np.ndarray:
    """Relative error of the modelled time, predicted / published - 1, per point (`memo`:
    a run's errors by the constants it uses, kept across calls by the fit)."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(pts):
        groups.setdefault(p.run, []).append(i)
    memo = {} if memo is None else memo
    out = np.empty(len(pts))
    for idx in groups.values():
        mine = [pts[i] for i in idx]
        key = _uses(mine[0], params)
        if key not in memo:
            t, _ = run_predictions(mine, params)
            memo[key] = t / np.array([p.time_us for p in mine]) - 1
        out[idx] = memo[key]
    return out


def _score(e: np.ndarray) -> float:
    """The fit's objective: the mean |relative error| (a worst-point term let one
    anomalous published row steer a network's constants)."""
    return float(np.abs(e).mean())


START_FRACTION, START_LATENCY_US, START_LL_GBPS = 0.8, 5.0, 1.0  # where the fit starts
START_FILL_BYTES = float(2 ** 22)


def link_names(pts: list[Point]) -> list[str]:
    """The networks (by link name) whose own latency is fitted: those runs cross."""
    return sorted({c.inter_node.name for p in pts for c in [CLUSTERS[p.cluster]]
                   if c.inter_node is not None and p.n_nodes > 1})


def _start(pts: list[Point]) -> tuple[ModelParams, list[str], list[str]]:
    """Where the fit starts, whatever is shipped; the networks and switches fitted."""
    nets = sorted({c.inter_node.name for p in pts for c in [CLUSTERS[p.cluster]]
                   if c.inter_node is not None and p.n_nodes > 1})
    switches = sorted({CLUSTERS[p.cluster].intra_node.name for p in pts
                       if CLUSTERS[p.cluster].nvls})
    links = fill_links(pts)
    params = replace(DEFAULT_PARAMS, launch_us=START_LATENCY_US,
                     link_fractions=dict.fromkeys(nets, START_FRACTION),
                     nvls_fractions=dict.fromkeys(switches, START_FRACTION),
                     ll_network_GBps=dict.fromkeys(nets, START_LL_GBPS),
                     hop_us=dict.fromkeys(link_names(pts), START_LATENCY_US),
                     fill_us=dict.fromkeys(links, 0.0),
                     fill_bytes=dict.fromkeys(links, START_FILL_BYTES))
    return params, nets, switches


def fill_links(pts: list[Point]) -> list[str]:
    """The bottleneck links (by name) whose fill term is fitted: those the runs end on."""
    return sorted({link_of(p) for p in pts})


def fit(pts: list[Point], rounds: int = 4) -> ModelParams:
    """The fitted ModelParams on the training points given."""
    params, nets, switches = _start(pts)
    memo: dict[tuple[Any, ...], np.ndarray] = {}  # a run's errors, by the constants it uses

    def best(field: str, key: str, grid: Iterable[float]) -> ModelParams:
        table: dict[str, float] = getattr(params, field)
        changes: list[dict[str, Any]] = [{field: {**table, key: float(v)}} for v in grid]
        return min((replace(params, **c) for c in changes),
                   key=lambda q: _score(errors(pts, q, memo)))

    for _ in range(rounds):
        for net in nets:
            params = best("link_fractions", net, FRACTION_GRID)
            params = best("ll_network_GBps", net, LL_GRID_GBPS)
        for switch in switches:
            params = best("nvls_fractions", switch, FRACTION_GRID)
        params = min((replace(params, launch_us=a) for a in LATENCY_GRID_US),
                     key=lambda q: _score(errors(pts, q, memo)))
        for name in sorted(params.hop_us):
            params = best("hop_us", name, LATENCY_GRID_US)
        for name in sorted(params.fill_us):
            params = _best_fill(pts, params, name, memo)
    return params


def _best_fill(pts: list[Point], params: ModelParams, name: str,
               memo: dict[tuple[Any, ...], np.ndarray]) -> ModelParams:
    """`params` with the fill term of link `name` set to its best grid pair (K, S0), both
    at once (they trade against each other). Only the points on that link change, so the
    mean |error| over them decides, as over all points; the first best pair wins."""
    mine = [i for i, p in enumerate(pts) if link_of(p) == name]
    base = replace(params, fill_us={**params.fill_us, name: 0.0})
    pub = np.array([pts[i].time_us for i in mine])
    t0 = pub * (1 + errors(pts, base, memo)[mine])
    s = np.array([float(pts[i].nbytes) for i in mine])
    k = np.array(FILL_GRID_US)[:, None, None]
    b = np.array(FILL_GRID_BYTES)[None, :, None]
    score = np.abs((t0 + k * s / (s + b)) / pub - 1).mean(axis=2)
    i, j = np.unravel_index(int(score.argmin()), score.shape)
    return replace(params, fill_us={**params.fill_us, name: FILL_GRID_US[i]},
                   fill_bytes={**params.fill_bytes, name: FILL_GRID_BYTES[j]})


def link_of(p: Point) -> str:
    """The name of the link whose fill term `p`'s run pays (`nccl.bottleneck`)."""
    return bottleneck(CLUSTERS[p.cluster], GroupShape(p.n_nodes, p.ranks_per_node)).name


def fitted_constants(params: ModelParams, pts: list[Point]) -> dict[str, Any]:
    """The constants `fit` sets for these points (what dpsim must ship)."""
    _, nets, switches = _start(pts)
    return {"link_fractions": {k: params.link_fractions[k] for k in nets},
            "ll_network_GBps": {k: params.ll_network_GBps[k] for k in nets},
            "nvls_fractions": {k: params.nvls_fractions[k] for k in switches},
            "launch_us": params.launch_us, "hop_latency_us": dict(params.hop_us),
            "fill_us": {k: v for k, v in params.fill_us.items() if v},
            "fill_bytes": {k: params.fill_bytes[k] for k, v in params.fill_us.items() if v}}


def family(collective: str, n_nodes: int) -> str:
    """A point's family: its collective, on one node or across nodes."""
    return f"{collective}, {'one node' if n_nodes == 1 else 'multi-node'}"


def family_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: held-out count, median and worst |error|, and the worst row."""
    out: dict[str, dict[str, Any]] = {}
    for fam in sorted({r["family"] for r in rows}):
        held = [r for r in rows if r["family"] == fam and r["held_out"]]
        errs = [abs(r["error"]) for r in held]
        out[fam] = {"n_held_out": len(held), "median": float(np.median(errs)),
                    "worst": max(errs), "within_30_percent": float(np.mean(np.array(errs) <= 0.3)),
                    "worst_case": max(held, key=lambda r: abs(r["error"]))}
    return out


def _rows(pts: list[Point], params: ModelParams) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for run in dict.fromkeys(p.run for p in pts):
        mine = [p for p in pts if p.run == run]
        t, chosen = run_predictions(mine, params)
        rows += [{"run": p.run, "collective": p.collective,
                  "family": family(p.collective, p.n_nodes), "nbytes": p.nbytes,
                  "published_us": p.time_us, "predicted_us": round(float(ti), 3),
                  "error": round(float(ti) / p.time_us - 1, 4), "algorithm": c,
                  "held_out": p.held_out} for p, ti, c in zip(mine, t, chosen, strict=True)]
    return rows


def evaluate(paths: Path | Iterable[Path] | None = None) -> dict[str, Any]:
    """Fit on the training half, predict every point; rows, fitted constants, summary."""
    pts = points(load_runs(paths))
    train = [p for p in pts if not p.held_out]
    params = fit(train)
    rows = _rows(pts, params)
    held = np.array([abs(r["error"]) for r in rows if r["held_out"]])
    resid = np.array([abs(r["error"]) for r in rows if not r["held_out"]])
    return {"rows": rows, "fitted": fitted_constants(params, train),
            "families": family_summary(rows),
            "held_out_median": float(np.median(held)), "held_out_worst": float(held.max()),
            "fit_residual_median": float(np.median(resid)),
            "fit_residual_worst": float(resid.max()),
            "n_points": len(rows), "n_held_out": int(held.size)}


def shipped_rows(paths: Path | Iterable[Path] | None = None) -> list[dict[str, Any]]:
    """Every published point beside the model with the constants dpsim ships (no fit here:
    they are the fit `evaluate` reproduces), with its held-out flag."""
    return _rows(points(load_runs(paths)), DEFAULT_PARAMS)


def held_out_summary(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per run: (median, worst) |error| over its held-out points."""
    out: dict[str, tuple[float, float]] = {}
    for run in dict.fromkeys(r["run"] for r in rows):
        errs = [abs(r["error"]) for r in rows if r["run"] == run and r["held_out"]]
        out[run] = (float(np.median(errs)), max(errs))
    return out
