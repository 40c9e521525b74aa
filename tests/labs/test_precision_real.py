"""Chapter 9's real run: activation checkpointing in this process."""

from __future__ import annotations

import pytest

from dpsim.labs.ch09_precision.checkpointing import measure_checkpointing

pytestmark = pytest.mark.slow


def test_checkpointing_within_ten_percent() -> None:
    ck = measure_checkpointing(batch=32, reps=1)
    assert abs(ck.error) < 0.10
    assert ck.measured < ck.plain_bytes / 2
    assert ck.plain_predicted == pytest.approx(ck.plain_bytes, rel=0.10)
    assert ck.simulated_ratio == pytest.approx(4 / 3)
