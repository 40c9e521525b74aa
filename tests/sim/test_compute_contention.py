"""The CPU-contention rule that decides whether DDP's all-reduces hide behind backward."""

from __future__ import annotations

import pytest

from dpsim.sim import comm_overlaps_compute
from dpsim.sim.cost.compute_contention import spare_cores


def test_two_single_thread_ranks_on_two_cores_leave_no_core_for_communication() -> None:
    assert spare_cores(2, 2, 1) == 0
    assert not comm_overlaps_compute("cpu", 2, 2, 1)


def test_a_spare_core_per_rank_lets_communication_overlap() -> None:
    assert comm_overlaps_compute("cpu", 4, 2, 1)
    assert comm_overlaps_compute("cpu", 8, 2, 3)
    assert not comm_overlaps_compute("cpu", 3, 2, 1)  # one spare core for two ranks
    assert not comm_overlaps_compute("cpu", 8, 2, 4)


def test_gpus_overlap_whatever_the_host_cores() -> None:
    assert comm_overlaps_compute("gpu", 1, 8, 1)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"kind": "tpu"}, "kind"), ({"cores": 0}, "cores"), ({"ranks_per_host": -1}, "ranks_per_host"),
    ({"threads_per_rank": 1.5}, "threads_per_rank")])
def test_bad_input_names_the_field(kwargs: dict[str, object], field: str) -> None:
    args: dict[str, object] = {"kind": "cpu", "cores": 2, "ranks_per_host": 2,
                               "threads_per_rank": 1, **kwargs}
    with pytest.raises(ValueError, match=field):
        comm_overlaps_compute(**args)  # type: ignore[arg-type]
