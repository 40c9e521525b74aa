"""ZeRO stages, precision bytes, the largest model that fits, FSDP2 shard accounting."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsim.sim import (
    checkpointed_activation_bytes,
    max_params_that_fit,
    precision_bytes_per_param,
    zero_bytes_per_device,
)
from dpsim.sim.cost.fsdp_shards import (
    fsdp_padded_shard_numel,
    fsdp_rank_bytes,
    fsdp_shard_numel,
    fsdp_shard_rows,
)
from dpsim.sim.workload import get_workload


def test_zero_paper_example_7_5b_on_64_devices() -> None:
    gb = [round(zero_bytes_per_device(7_500_000_000, 64, s).model_states / 1e9, 1)
          for s in range(4)]
    assert gb == [120.0, 31.4, 16.6, 1.9]


def test_precision_bytes_per_param() -> None:
    assert precision_bytes_per_param("mixed", "adam") == (2, 2, 12)
    assert sum(precision_bytes_per_param("mixed", "adam")) == 16
    assert precision_bytes_per_param("fp32", "adam") == (4, 4, 8)
    assert precision_bytes_per_param("bf16", "adam") == (2, 2, 4)
    assert precision_bytes_per_param("fp32", "sgd") == (4, 4, 0)
    assert precision_bytes_per_param("mixed", "sgd") == (2, 2, 4)  # the fp32 master copy


@pytest.mark.parametrize("bad", [{"precision": "fp8"}, {"precision": "FP32"},
                                 {"optimizer": "lion"}])
def test_unknown_precision_or_optimizer_is_a_clear_error(bad: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="allowed"):
        precision_bytes_per_param(**bad)


def test_negative_model_size_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="n_params=-5"):
        zero_bytes_per_device(-5, 8, 3)
    with pytest.raises(ValueError, match="stage=4"):
        zero_bytes_per_device(10, 8, 4)
    with pytest.raises(ValueError, match="memory_bytes"):
        max_params_that_fit(-1, 8, 3)


@settings(max_examples=60, deadline=None)
@given(memory=st.integers(0, 10**12), n=st.integers(1, 1024), stage=st.integers(0, 3),
       optimizer_bytes=st.sampled_from([0, 4, 8, 12]))
def test_max_params_that_fit_is_the_largest(memory: int, n: int, stage: int,
                                            optimizer_bytes: int) -> None:
    best = max_params_that_fit(memory, n, stage, optimizer_bytes=optimizer_bytes)
    used = zero_bytes_per_device(best, n, stage, optimizer_bytes=optimizer_bytes).model_states
    assert used <= memory
    assert zero_bytes_per_device(best + 1, n, stage,
                                 optimizer_bytes=optimizer_bytes).model_states > memory


def test_stage3_fits_about_n_times_more_than_ddp() -> None:
    ddp = max_params_that_fit(80 * 10**9, 64, 0)
    fsdp = max_params_that_fit(80 * 10**9, 64, 3)
    assert ddp == 5 * 10**9  # 80 GB / 16 B
    assert abs(fsdp - 320 * 10**9) <= 64  # floors of the shards let a few more in


@settings(max_examples=200, deadline=None)
@given(dim0=st.integers(0, 200), rest=st.integers(1, 5), n=st.integers(1, 9))
def test_shards_follow_torch_chunk_and_cover_the_parameter(dim0: int, rest: int, n: int) -> None:
    chunks = list(torch.empty(dim0, rest).chunk(n, dim=0)) if dim0 else []
    rows = [fsdp_shard_rows(dim0, n, r) for r in range(n)]
    assert rows[:len(chunks)] == [c.shape[0] for c in chunks]
    assert sum(rows) == dim0
    assert all(r <= -(-dim0 // n) for r in rows)
    assert sum(fsdp_shard_numel((dim0, rest), n, r) for r in range(n)) == dim0 * rest
    assert fsdp_padded_shard_numel((dim0, rest), n) * n >= dim0 * rest


def test_rank_bytes_padding_example() -> None:
    shapes = [(7, 5), (7,), (3, 7), (3,)]  # Linear(5, 7), Linear(7, 3) on 3 ranks
    last = fsdp_rank_bytes(shapes, 3, 2)
    assert last.parameters == 4 * (1 * 5 + 1 + 1 * 7 + 1)  # 7 rows -> 3, 3, 1
    padded = fsdp_rank_bytes(shapes, 3, 2, padded=True)
    assert padded.parameters == 4 * (3 * 5 + 3 + 1 * 7 + 1)
    assert padded.optimizer == last.optimizer == 2 * last.parameters + 4 * 4


def test_checkpointing_keeps_fewer_activations() -> None:
    w = get_workload("gpt2-124m")
    loss = 4 * w.loss_bytes
    full = w.activation_bytes(4) - loss
    ckpt = checkpointed_activation_bytes(w, 4) - loss
    assert 0 < ckpt < full / 5  # blocks keep their 2*s*h input instead of 34*s*h
