"""Every published nccl-tests run in dpsim/sim/fidelity/data/nccl_tests*.json: a full citation, a
known cluster preset, and rows that obey nccl-tests' own arithmetic (a check on transcription).

nccl-tests (doc/PERFORMANCE.md) prints algbw = size / time and busbw = algbw * 2(n-1)/n for
all_reduce, algbw * (n-1)/n for all_gather and reduce_scatter (size: the whole buffer), both
rounded to 0.01 GB/s; a mistyped size, time or bandwidth breaks that identity.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dpsim.sim.collectives.nccl import GroupShape, nccl_time_s, rates
from dpsim.sim.fidelity.collectives import dpsim_nbytes
from dpsim.sim.hardware.presets import CLUSTERS

DATA = Path(__file__).resolve().parents[2] / "dpsim" / "sim" / "fidelity" / "data"
FILES = sorted(DATA.glob("nccl_tests*.json"))
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n}
ISSUE_URL = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull|discussions)/\d+")


def _runs() -> list[dict[str, Any]]:
    return [run for f in FILES for run in json.loads(f.read_text())["runs"]]


def _citation_problems(run: dict[str, Any]) -> list[str]:
    src, bad = run["source"], []
    if not src.get("repo") or not src.get("where"):
        bad.append("source needs repo and where")
    if src.get("kind") == "repository":
        if not src.get("path") or not re.fullmatch(r"[0-9a-f]{40}", src.get("commit", "")):
            bad.append("a repository source needs path and a 40-hex commit")
    elif src.get("kind") == "issue":
        if not ISSUE_URL.match(src.get("url", "")) or src["repo"] not in src["url"]:
            bad.append("an issue source needs the thread URL of its repo")
    else:
        bad.append(f"source kind {src.get('kind')!r} is not 'repository' or 'issue'")
    return bad


def _row_problems(run: dict[str, Any]) -> list[str]:
    """Rows whose printed algbw/busbw do not follow from size and time (or sizes out of order)."""
    n = run["n_nodes"] * run["ranks_per_node"]
    factor, bad, last = BUS_FACTOR[run["collective"]](n), [], 0
    for p in run["points"]:
        if p["nbytes"] <= last or p["time_us"] <= 0:
            bad.append(f"{run['id']} {p['nbytes']} B: sizes must grow and times be > 0")
        last = p["nbytes"]
        alg = p["nbytes"] / p["time_us"] / 1e3  # GB/s
        for name, want in (("algbw_GBps", alg), ("busbw_GBps", alg * factor)):
            if abs(p[name] - want) > 0.0051 + 0.002 * want:  # printed to 0.01; time to ~4 digits
                bad.append(f"{run['id']} {p['nbytes']} B: {name} {p[name]} but size/time "
                           f"gives {want:.3f}")
    return bad


def test_there_are_runs_of_every_collective_kind_the_model_is_checked_on() -> None:
    assert len(FILES) >= 2
    kinds = {r["collective"] for r in _runs()}
    assert {"all_reduce", "all_gather", "reduce_scatter"} <= kinds


@pytest.mark.parametrize("run", _runs(), ids=lambda r: r["id"])
def test_every_run_is_cited_configured_and_consistent(run: dict[str, Any]) -> None:
    assert _citation_problems(run) == []
    assert run["cluster"] in CLUSTERS, \
        f"no preset {run['cluster']!r} in dpsim/sim/hardware/presets.py"
    assert run["collective"] in BUS_FACTOR
    assert 1 <= run["ranks_per_node"] <= CLUSTERS[run["cluster"]].devices_per_node
    assert run["n_nodes"] >= 1
    assert run["config"]
    assert run["points"]
    assert _row_problems(run) == []


def test_run_ids_are_unique_across_files() -> None:
    ids = [r["id"] for r in _runs()]
    assert len(ids) == len(set(ids))


def test_the_consistency_check_catches_a_mistyped_digit() -> None:
    run = copy.deepcopy(max(_runs(), key=lambda r: len(r["points"])))
    assert _row_problems(run) == []
    big = run["points"][-1]
    big["time_us"] *= 1.03  # one wrong digit in a time
    assert len(_row_problems(run)) == 2
    run["points"][-1], run["points"][-2] = run["points"][-2], run["points"][-1]
    assert any("must grow" in s for s in _row_problems(run))


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather", "all_reduce"])
def test_the_size_column_is_dpsims_nbytes(collective: str) -> None:
    """nccl-tests' size column is the whole tensor (reduce-scatter: its input, N x recvcount)
    and busbw = size / time x its factor; dpsim's nbytes is the same full tensor. So dpsim's
    ring time on a row's bytes, put through nccl-tests' busbw formula, gives back the
    per-rank NVLink rate the model assumes; a per-rank size would be N = 8 times off."""
    cluster, n = CLUSTERS["dgx-h100"], 8
    size = dpsim_nbytes(collective, 2**33)
    t = nccl_time_s(collective, size, cluster, n, algorithm="ring", protocol="Simple")
    busbw = size / t * BUS_FACTOR[collective](n)
    assert busbw == pytest.approx(rates(cluster, GroupShape(1, n))[0], rel=0.01)


@pytest.mark.parametrize("bad", [("broadcast", 8), ("reduce_scatter", -1),
                                 ("reduce_scatter", 2.5), ("all_gather", True)])
def test_the_byte_conversion_rejects_what_it_does_not_know(bad: tuple[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"collective|size_column"):
        dpsim_nbytes(*bad)

