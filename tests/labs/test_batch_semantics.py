"""DataParallel's batch is global, DDP's is per process
(dpsim.labs.ch03_data_parallel.batch_semantics)."""

from __future__ import annotations

import pytest

from dpsim.labs.ch03_data_parallel.batch_semantics import compare_batch_semantics


@pytest.mark.slow  # DDP runs in real gloo processes
def test_dp_batch_is_global_ddp_batch_is_per_process() -> None:
    rows = compare_batch_semantics(batch_size=8, n_devices=2, n_samples=32)
    dp, ddp = rows
    assert dp["samples per device"] == [4, 4]
    assert dp["samples per step"] == 8
    assert ddp["samples per device"] == [8, 8]
    assert ddp["samples per step"] == 16
    assert dp["first indices per device"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert ddp["first indices per device"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
