"""When no data-parallel strategy fits, the planner says where TP, PP and CP come in."""

from __future__ import annotations

import pytest

from dpsim.sim import CLUSTERS, beyond_data_parallel, get_workload, plan


def test_a_model_too_big_for_any_data_parallelism_is_sent_to_tensor_parallelism() -> None:
    w, node = get_workload("llama-70b"), CLUSTERS["h100-node"]
    b = beyond_data_parallel(w, node, 8, 64)
    assert not b.data_parallel_fits
    assert b.lowest_peak_bytes > b.memory_bytes
    # the lowest peak is FSDP at one sample per device with checkpointing
    assert b.lowest_peak_bytes == max(plan(w, node, "fsdp", 8, 8,
                                           activation_checkpointing=True).peak_bytes)
    assert b.one_sample_activation_bytes == w.activation_bytes(1, "bf16")
    kinds = [line.split(":")[0] for line in b.advice]
    assert kinds == ["tensor parallelism", "context parallelism", "pipeline parallelism"]


def test_the_batch_size_floor() -> None:
    b = beyond_data_parallel(get_workload("llama-70b"), CLUSTERS["h100-ib-16"], 128, 64)
    assert b.below_batch_floor
    assert not b.data_parallel_fits
    assert any(line.startswith("the batch-size floor") for line in b.advice)


def test_a_model_that_fits_gets_no_advice() -> None:
    b = beyond_data_parallel(get_workload("llama-7b"), CLUSTERS["h100-node"], 8, 64)
    assert b.data_parallel_fits
    assert b.advice == ()


@pytest.mark.parametrize(("kwargs", "field"), [({"n_devices": 0}, "n_devices"),
                                               ({"global_batch": 0}, "global_batch")])
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    args = {"n_devices": 8, "global_batch": 64, **kwargs}
    with pytest.raises(ValueError, match=field):
        beyond_data_parallel(get_workload("gpt2-124m"), CLUSTERS["h100-node"], **args)
