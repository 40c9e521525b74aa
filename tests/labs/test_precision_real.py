"""Chapter 9's real runs: one launch of 2 gloo ranks shared by every assertion, plus
activation checkpointing in this process."""

from __future__ import annotations

import pytest

from dpsim.labs.ch09_precision.checkpointing import measure_checkpointing
from dpsim.labs.ch09_precision.precision_lab import PrecisionLab, run_precision_lab

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab() -> PrecisionLab:
    return run_precision_lab(2)


def test_fsdp2_mixed_precision_shards_equal_the_prediction(lab: PrecisionLab) -> None:
    for r in lab.fsdp_mixed:
        assert r["measured"] == r["predicted"]
        assert r["measured_padded"] == r["predicted_padded"]
        assert r["dtypes"]["parameters (sharded)"] == "torch.float32"
        assert r["dtypes"]["gradients (sharded)"] == "torch.float32"
        assert r["dtypes"]["logits (compute)"] == "torch.bfloat16"


def test_checkpointed_fsdp2_keeps_block_inputs(lab: PrecisionLab) -> None:
    for r in lab.checkpoint:
        assert abs(r["kept_bytes"] - r["predicted_kept"]) <= 0.10 * r["kept_bytes"]
        assert r["loss"] == r["plain_loss"]


def test_clipping_equals_one_process(lab: PrecisionLab) -> None:
    c = lab.clip
    assert c["fsdp_norm_type"] == "DTensor"
    for norm in (*c["ddp_norms"], *c["fsdp_norms"]):
        assert norm == pytest.approx(c["one_process_norm"], rel=1e-6)
    assert c["ddp_max_grad_diff"] < 1e-6
    assert c["fsdp_max_grad_diff"] < 1e-6
    assert all(n < c["one_process_norm"] for n in c["local_shard_norms"])


def test_meta_init_peak_is_the_shard(lab: PrecisionLab) -> None:
    for r in lab.meta:
        assert r["on_meta"] == 0
        assert r["meta_peak_B"] == pytest.approx(r["predicted_meta_B"], rel=0.05)
        assert r["full_peak_B"] == pytest.approx(r["predicted_full_B"], rel=0.05)
        assert r["meta_peak_B"] < r["full_model_B"] / 1.9


def test_zero1_optimizer_state_equals_the_partition(lab: PrecisionLab) -> None:
    for r in lab.zero1:
        assert r["zero1_optimizer_B"] == r["predicted_zero1_optimizer_B"]
        assert r["max_param_diff"] == 0
    assert sum(r["zero1_optimizer_B"] for r in lab.zero1) == lab.zero1[0]["adam_optimizer_B"]


def test_offload_runs_unpinned_on_gloo(lab: PrecisionLab) -> None:
    for r in lab.offload:
        assert r["offload_devices"] == ["cpu"]
        assert r["max_param_diff"] == 0


def test_checkpointing_within_ten_percent() -> None:
    ck = measure_checkpointing(batch=32, reps=1)
    assert abs(ck.error) < 0.10
    assert ck.measured < ck.plain_bytes / 2
    assert ck.plain_predicted == pytest.approx(ck.plain_bytes, rel=0.10)
    assert ck.simulated_ratio == pytest.approx(4 / 3)
