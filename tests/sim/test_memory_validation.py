"""Bad calls to the memory and compute models: each names its field; results stay finite.

Bad calls go through the simulator's face (`dpsim.sim`), which checks the arguments; the
inner functions trust them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from dpsim.sim import (
    H100_80GB,
    MemoryBreakdown,
    backward_time_s,
    checkpointed_activation_bytes,
    forward_time_s,
    fsdp_padded_shard_numel,
    fsdp_rank_bytes,
    fsdp_shard_rows,
    max_batch_size,
    max_params_that_fit,
    model_state_bytes,
    optimizer_time_s,
    precision_bytes_per_param,
    predict_single,
    step_compute_s,
    zero_bytes_per_device,
)
from dpsim.sim.cost.memory import precision_dtype
from dpsim.sim.limits import MAX_COUNT, MAX_STATE_BYTES_PER_PARAM, MAX_WORLD_SIZE
from dpsim.sim.workload import Layer, Workload, get_workload
from tests.support.bad_input import raises_naming

LAYER = Layer("l", "Linear", 10, 2, 40, 40, 400.0)
W = Workload("w", (LAYER,))
GPT2 = get_workload("gpt2-124m")

MEMORY_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("parameters", lambda: MemoryBreakdown(parameters=-1)),
    ("activations", lambda: MemoryBreakdown(activations=1.5)),  # type: ignore[arg-type]
    ("n_params", lambda: model_state_bytes(math.nan)),  # type: ignore[arg-type]
    ("n_param_tensors", lambda: model_state_bytes(10, -2)),
    ("dtype", lambda: model_state_bytes(10, dtype="float32")),
    ("mixed_precision", lambda: model_state_bytes(10, dtype="bf16", mixed_precision=1)),  # type: ignore[arg-type]
    ("optimizer", lambda: model_state_bytes(10, optimizer=None)),  # type: ignore[arg-type]
    ("workload", lambda: predict_single("gpt2-124m", 1)),  # type: ignore[arg-type]
    ("batch_size", lambda: predict_single(W, -1)),
    ("batch_size", lambda: predict_single(W, 2.0)),  # type: ignore[arg-type]
    ("dtype", lambda: predict_single(W, 1, dtype="int8")),
    ("workload", lambda: max_batch_size(None, 10)),  # type: ignore[arg-type]
    ("memory_bytes", lambda: max_batch_size(W, -1)),
    ("memory_bytes", lambda: max_batch_size(W, math.inf)),  # type: ignore[arg-type]
    ("limit", lambda: max_batch_size(W, 10**6, limit=-1)),
    ("limit", lambda: max_batch_size(W, 10**6, limit=MAX_COUNT + 1)),
    ("n_params", lambda: zero_bytes_per_device(-5, 8, 3)),
    ("world_size", lambda: zero_bytes_per_device(10, 0, 3)),
    ("world_size", lambda: zero_bytes_per_device(10, MAX_WORLD_SIZE + 1, 3)),
    ("stage", lambda: zero_bytes_per_device(10, 8, True)),
    ("stage", lambda: zero_bytes_per_device(10, 8, 3.0)),  # type: ignore[arg-type]
    ("stage", lambda: zero_bytes_per_device(10, 8, 4)),
    ("param_bytes", lambda: zero_bytes_per_device(10**9, 8, 3, param_bytes=-1)),
    ("grad_bytes", lambda: zero_bytes_per_device(10, 8, 3, grad_bytes=2.5)),  # type: ignore[arg-type]
    ("optimizer_bytes", lambda: zero_bytes_per_device(
        10, 8, 3, optimizer_bytes=MAX_STATE_BYTES_PER_PARAM + 1)),
    ("precision", lambda: precision_bytes_per_param("fp8")),
    ("memory_bytes", lambda: max_params_that_fit(-1, 8, 3)),
    ("world_size", lambda: max_params_that_fit(10**9, 0, 3)),
    ("stage", lambda: max_params_that_fit(10**9, 8, 5)),
    ("param_bytes", lambda: max_params_that_fit(10**9, 8, 3, param_bytes=-2)),
    ("reserved_bytes", lambda: max_params_that_fit(10**9, 8, 3, reserved_bytes=-1)),
    ("workload", lambda: checkpointed_activation_bytes([LAYER], 1)),  # type: ignore[arg-type]
    ("batch_size", lambda: checkpointed_activation_bytes(W, -1)),
    ("dtype", lambda: checkpointed_activation_bytes(W, 1, "fp8")),
    ("dim0", lambda: fsdp_shard_rows(-1, 2, 0)),
    ("world_size", lambda: fsdp_shard_rows(10, 0, 0)),
    ("rank", lambda: fsdp_shard_rows(10, 2, 2)),
    ("shape", lambda: fsdp_padded_shard_numel(7, 2)),  # type: ignore[arg-type]
    ("shape[1]", lambda: fsdp_padded_shard_numel((7, -5), 2)),
    ("shape (elements)", lambda: fsdp_padded_shard_numel((2**40, 2**40), 2)),
    ("world_size", lambda: fsdp_padded_shard_numel((7, 5), -1)),
    ("param_shapes[0]", lambda: fsdp_rank_bytes((7, 5), 2, 0)),  # type: ignore[arg-type]
    ("param_shapes", lambda: fsdp_rank_bytes({(7, 5)}, 2, 0)),  # type: ignore[arg-type]
    ("param_shapes[1][0]", lambda: fsdp_rank_bytes([(7, 5), (True,)], 2, 0)),
    ("param_shapes (elements of the local shards)", lambda: fsdp_rank_bytes(
        [(MAX_COUNT,), (MAX_COUNT,)], 1, 0)),
    ("rank", lambda: fsdp_rank_bytes([], 2, 5)),
    ("padded", lambda: fsdp_rank_bytes([(7, 5)], 2, 0, padded=None)),  # type: ignore[arg-type]
    ("dtype", lambda: fsdp_rank_bytes([(7, 5)], 2, 0, dtype="fp64")),
]

COMPUTE_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("layer", lambda: forward_time_s(W, 1, H100_80GB)),  # type: ignore[arg-type]
    ("batch_size", lambda: forward_time_s(LAYER, -1, H100_80GB)),
    ("device", lambda: forward_time_s(LAYER, 1, "h100-80gb")),  # type: ignore[arg-type]
    ("dtype", lambda: forward_time_s(LAYER, 1, H100_80GB, "fp64")),
    ("captured_dtype", lambda: backward_time_s(LAYER, 1, H100_80GB, "fp32", "int8")),
    ("batch_size", lambda: backward_time_s(LAYER, MAX_COUNT + 1, H100_80GB)),
    ("n_params", lambda: optimizer_time_s(-1, 1, H100_80GB)),
    ("n_param_tensors", lambda: optimizer_time_s(10, math.nan, H100_80GB)),  # type: ignore[arg-type]
    ("device", lambda: optimizer_time_s(10, 1, None)),  # type: ignore[arg-type]
    ("optimizer", lambda: optimizer_time_s(10, 1, H100_80GB, "lion")),
    ("workload", lambda: step_compute_s("gpt2-124m", 1, H100_80GB)),  # type: ignore[arg-type]
    ("batch_size", lambda: step_compute_s(Workload("empty", ()), -1, H100_80GB)),
    ("dtype", lambda: step_compute_s(W, 1, H100_80GB, "fp64")),
]


@pytest.mark.parametrize(("field", "call"), MEMORY_CALLS + COMPUTE_CALLS,
                         ids=[f"{i}-{f}" for i, (f, _) in enumerate(MEMORY_CALLS + COMPUTE_CALLS)])
def test_bad_memory_and_compute_inputs_name_their_field(field: str,
                                                         call: Callable[[], object]) -> None:
    with raises_naming(field):
        call()


def test_a_shape_of_too_many_dimensions_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^shape\b"):
        fsdp_padded_shard_numel((1,) * 65, 2)


def test_negative_bytes_per_param_no_longer_give_negative_bytes() -> None:
    with pytest.raises(ValueError, match=r"^param_bytes=-1 is out of range; allowed >= 0 and "
                                         rf"<= {MAX_STATE_BYTES_PER_PARAM}$"):
        zero_bytes_per_device(10**9, 8, 3, param_bytes=-1)


def test_a_layer_with_negative_activations_cannot_reach_predict_single() -> None:
    with pytest.raises(ValueError, match=r"^activation_bytes=-1 is out of range"):
        Layer("l", "Linear", 1, 1, -1, 0, 0.0)


@pytest.mark.timeout(10)  # the worst cases of the search: a guard against a hang
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("per_param", [(0, 0, 1), (1024, 1024, 1024)])
def test_max_params_that_fit_at_the_bounds(stage: int, per_param: tuple[int, int, int]) -> None:
    pb, gb, ob = per_param
    best = max_params_that_fit(MAX_COUNT, MAX_WORLD_SIZE, stage, param_bytes=pb,
                               grad_bytes=gb, optimizer_bytes=ob)
    assert 0 < best <= MAX_COUNT
    used = zero_bytes_per_device(best, MAX_WORLD_SIZE, stage, param_bytes=pb, grad_bytes=gb,
                                 optimizer_bytes=ob).model_states
    assert used <= MAX_COUNT
    if best < MAX_COUNT:  # the answer is the largest, unless capped at MAX_COUNT
        assert zero_bytes_per_device(best + 1, MAX_WORLD_SIZE, stage, param_bytes=pb,
                                     grad_bytes=gb, optimizer_bytes=ob).model_states > MAX_COUNT


def test_the_largest_accepted_inputs_give_finite_non_negative_results() -> None:
    huge = Workload("huge", (Layer("l", "Linear", MAX_COUNT, MAX_COUNT, MAX_COUNT, MAX_COUNT,
                                   1e30),), dtype="bf16")
    peak = predict_single(huge, MAX_COUNT, dtype="fp32")
    assert all(v >= 0 for v in peak.as_dict().values())
    assert peak.activations == huge.activation_bytes(MAX_COUNT, "fp32") > 0
    assert checkpointed_activation_bytes(huge, MAX_COUNT, "fp32") >= 0
    assert max_batch_size(huge, MAX_COUNT, limit=MAX_COUNT) == 0
    seconds = step_compute_s(huge, MAX_COUNT, H100_80GB, "fp32", "adamw")
    assert math.isfinite(seconds)
    assert seconds > 0


def test_valid_calls_keep_their_numbers() -> None:
    assert zero_bytes_per_device(10**9, 8, 3).as_dict() == {
        "parameters": 250_000_000, "gradients": 250_000_000, "optimizer": 1_500_000_000,
        "activations": 0}
    assert max_params_that_fit(80 * 10**9, 64, 3) == 320_000_000_005
    assert max_batch_size(W, 10**6, limit=100) == 100
    assert fsdp_rank_bytes([(7, 5), (7,)], 3, 2, padded=True).parameters == 4 * (3 * 5 + 3)
    assert precision_dtype("mixed") == "bf16"
    assert GPT2.activation_bytes(2, "fp32") == predict_single(GPT2, 2).activations


def test_max_params_that_fit_is_exact_beyond_float_precision() -> None:
    """Above 2**53 parameters a float search stopped 2 short; the search is now exact."""
    budget, kw = 738156883179221, {"param_bytes": 4, "grad_bytes": 4, "optimizer_bytes": 8}
    best = max_params_that_fit(budget, 1000, 3, **kw)
    assert best == 46134805198701499
    assert zero_bytes_per_device(best, 1000, 3, **kw).model_states <= budget
    assert zero_bytes_per_device(best + 1, 1000, 3, **kw).model_states > budget
