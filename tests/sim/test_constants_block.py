"""`python -m dpsim validate --write-constants`: the fitted block of link_constants.py is
the fit's constants written out, exactly what dpsim ships."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpsim.reports import constants_block

ROOT = Path(__file__).resolve().parents[2]
FITTED = json.loads((ROOT / "benchmarks/results/validation.json").read_text())[
    "families"]["nccl_tests_time"]["fitted"]


def test_shipped_block_is_the_recorded_fit_written_out() -> None:
    shipped = constants_block.BLOCK.search((ROOT / constants_block.FILE).read_text())
    assert shipped is not None
    assert constants_block.block(FITTED) == shipped.group(0)


def test_write_replaces_only_the_block(tmp_path: Path) -> None:
    target = tmp_path / constants_block.FILE
    target.parent.mkdir(parents=True)
    target.write_text("A = 1\n# fitted: begin\nLAUNCH_US = 0\n# fitted: end\nB = 2\n")
    changed = {**FITTED, "launch_us": 12.5, "fill_us": {"X": 3.0}, "fill_bytes": {"X": 64.0}}
    constants_block.write(changed, tmp_path)
    text = target.read_text()
    assert text.startswith("A = 1\n# fitted: begin\n")
    assert text.endswith("# fitted: end\nB = 2\n")
    assert "LAUNCH_US = Constant(12.5, FIT)" in text
    assert '"X": Constant(64.0, FIT)' in text
    target.write_text("no block here\n")
    with pytest.raises(ValueError, match="fitted: begin"):
        constants_block.write(FITTED, tmp_path)
