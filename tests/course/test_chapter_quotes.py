"""Numbers the chapters quote in prose from the collective model's validation are the ones
`python -m dpsim validate` finds and the constants dpsim ships: a refit that moves them fails
here until the text says the new number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dpsim.sim.collectives.params import DEFAULT_PARAMS
from dpsim.sim.fidelity.collectives import load_runs
from dpsim.sim.hardware import INFINIBAND_NDR, get_cluster

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads((ROOT / "benchmarks/results/validation.json").read_text())
NCCL = RESULTS["families"]["nccl_tests_time"]


def _markdown(notebook: str) -> str:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _chapter_7_calibration() -> str:
    """Chapter 7's calibration text, moved to the appendix."""
    return _markdown("11_how_far_to_trust_dpsim.ipynb")


def _quoted(text: str, pattern: str) -> float:
    found = re.search(pattern, re.sub(r"\s+", " ", text))
    assert found, f"the text no longer says {pattern!r}"
    return float(found.group(1))


def _held_out() -> np.ndarray:
    return np.array([abs(r["error"]) for r in NCCL["rows"] if r["held_out"]])


@pytest.mark.parametrize("notebook", ["11_how_far_to_trust_dpsim.ipynb",
                                      "07_choosing_a_strategy.ipynb"])
def test_held_out_median_and_share_within_30_percent_as_quoted(notebook: str) -> None:
    text, held = _markdown("11_how_far_to_trust_dpsim.ipynb"), _held_out()
    within = round(100 * float(np.mean(held <= 0.30)))
    if notebook.startswith("11"):
        assert _quoted(text, r"Half the held-out points are within about (\d+) %") == \
            round(100 * float(np.median(held)))
        assert _quoted(text, r"and (\d+) % within 30 %") == within
    else:  # chapter 7 keeps a link to the appendix, which quotes the numbers once
        assert "11_how_far_to_trust_dpsim" in _markdown(notebook)
        runs = _quoted(text, r"half of the points of (\d+) published nccl-tests runs")
        assert runs == len(load_runs())


def test_chapter_7_quotes_the_shipped_network_constants() -> None:
    text = _chapter_7_calibration()
    assert _quoted(text, r"f_net = (\d\.\d+) fitted for the NDR") == \
        round(DEFAULT_PARAMS.fraction(INFINIBAND_NDR), 2)
    eth = get_cluster("h100-eth-4").inter_node
    assert eth is not None
    assert _quoted(text, r"next to the fitted (\d+) us of this network's hop") == \
        round(DEFAULT_PARAMS.net_us(eth))


def test_chapter_2_quotes_the_headline_held_out_median() -> None:
    text = _markdown("02_collectives.ipynb")
    assert _quoted(text, r"miss by about \*\*(\d+) % \(median, held-out points\)") == \
        round(100 * float(np.median(_held_out())))


def test_the_appendix_quotes_the_left_out_runs_benchmark() -> None:
    runs = json.loads((ROOT / "benchmarks/results/collective_runs.json").read_text())
    text = _markdown("11_how_far_to_trust_dpsim.ipynb")
    assert _quoted(text, r"collective_runs`\): median (\d+) % over its points") == \
        round(100 * runs["median"])
    assert _quoted(text, r"over its points, (\d+) % within 30 %") == \
        round(100 * runs["within_30_percent"])


@pytest.mark.parametrize(("family", "pattern"), [
    ("pytorch_ddp_benchmark", r"every point within (\d+\.\d) %"),
    ("nvidia_resnet50_scaling", r"2-16 GPUs \(held out: median (\d+\.\d) %"),
    ("fsdp_zero3_throughput_at_scale", r"8-512 GPUs \(held out: median (\d+\.\d) %"),
])
def test_chapter_7_quotes_the_step_time_families(family: str, pattern: str) -> None:
    value = RESULTS["families"][family]["value"]
    text = _chapter_7_calibration()
    quoted = value["worst"] if "every point" in pattern else value["median"]
    assert _quoted(text, pattern) == round(100 * quoted, 1)


def test_chapter_7_keeps_the_headline_held_out_error() -> None:
    """The chapter keeps one sentence: the held-out step-time medians, and a link."""
    medians = [RESULTS["families"][f]["value"]["median"]
               for f in ("nvidia_resnet50_scaling", "fsdp_zero3_throughput_at_scale")]
    text = _markdown("07_choosing_a_strategy.ipynb")
    low, high = sorted(round(100 * m, 1) for m in medians)
    assert f"median of {low}-{high} %" in re.sub(r"\s+", " ", text)
    assert "11_how_far_to_trust_dpsim.ipynb" in text
