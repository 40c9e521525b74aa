"""Real DDP on gloo ranks: same model as one process, real buckets, no_sync (chapter 8's).

Everything runs in ONE launch of 2 ranks (module fixture) to keep the file fast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from dpsim.labs.ch05_ddp.ddp_recorder import (
    RankRecording,
    gradient_ready_order,
    param_nbytes,
    record_rank,
)
from dpsim.labs.ch05_ddp.ddp_train import (
    DDPRun,
    DDPRunConfig,
    RankRun,
    build_dataset,
    build_model,
    global_batches,
    max_param_difference,
    run_ddp,
    train_global_batch,
    train_rank,
)
from dpsim.labs.ch08_myths.no_sync import no_sync_demo
from dpsim.runtime.launch import launch
from dpsim.sim.strategies.ddp import build_buckets, grad_tensors, step_result
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload

WORLD_SIZE = 2
TOLERANCE = 1e-5  # float32: the all-reduce sums in another order than one process does
# 96 samples / 2 ranks / batch 8 = 6 steps per epoch: 9 steps cross into epoch 2 (set_epoch)
TRAIN = DDPRunConfig(n_samples=96, batch_size=8, steps=9, seed_per_rank=True, progress=False)
BUCKET_MODELS = {  # name: (config, buckets DDP builds)
    "mlp, default caps (first bucket 1 MiB)": (
        DDPRunConfig(hidden=600, depth=3, steps=1, batch_size=4, progress=False), 2),
    "cnn, bucket_cap_mb=0.01": (  # 3 steps: the recorder keeps fewer hooks after the first
        DDPRunConfig(model="cnn", hidden=16, depth=3, steps=3, batch_size=4,
                     bucket_cap_mb=0.01, progress=False), 3),
    "small mlp, one bucket (rebuilt in gradient order)": (
        DDPRunConfig(hidden=16, depth=2, steps=1, batch_size=4, progress=False), 1),
}


@pytest.fixture(scope="module")
def runs() -> list[dict[str, Any]]:
    """Per rank: the training run, bucket recordings of two models, the option demos."""
    models = [cfg for cfg, _ in BUCKET_MODELS.values()]
    return launch(lambda rank, ws: {
        "train": train_rank(rank, ws, TRAIN),
        "buckets": [record_rank(rank, ws, cfg, warmup=2) for cfg in models],
        "no_sync": no_sync_demo(rank),
    }, WORLD_SIZE, backend="gloo", timeout_s=150)


def _train(runs: list[dict[str, Any]]) -> DDPRun:
    ranks: list[RankRun] = [r["train"] for r in runs]
    return DDPRun(TRAIN, ranks)


@pytest.mark.slow
def test_ddp_trains_the_same_model_as_one_process_on_the_global_batch(runs: list[dict[str, Any]]
                                                                       ) -> None:
    run = _train(runs)
    single = train_global_batch(TRAIN, WORLD_SIZE)
    assert run.ranks[0].epochs == 2  # set_epoch(1) reshuffled the second epoch
    assert max_param_difference(run.ranks[0].params, single.params) < TOLERANCE
    # the global-batch loss is the mean of the ranks' losses (equal shares)
    np.testing.assert_allclose(run.losses.mean(axis=0), single.losses, atol=TOLERANCE)


@pytest.mark.slow
def test_every_rank_ends_with_identical_parameters(runs: list[dict[str, Any]]) -> None:
    run = _train(runs)
    assert run.max_rank_difference() == 0.0
    assert len({r.checksum_final for r in run.ranks}) == 1
    assert not np.allclose(run.losses[0], run.losses[1])  # each rank saw its own data


@pytest.mark.slow
def test_different_seeds_agree_after_the_initial_broadcast(runs: list[dict[str, Any]]) -> None:
    ranks = _train(runs).ranks
    assert abs(ranks[0].checksum_before_ddp - ranks[1].checksum_before_ddp) > 1e-3
    assert ranks[1].checksum_after_ddp == ranks[0].checksum_before_ddp
    assert ranks[0].checksum_after_ddp == ranks[0].checksum_before_ddp


@pytest.mark.slow
def test_distributed_sampler_splits_the_global_batch(runs: list[dict[str, Any]]) -> None:
    firsts = [r.first_indices for r in _train(runs).ranks]
    assert not set(firsts[0]) & set(firsts[1])
    assert firsts[0] + firsts[1] == global_batches(TRAIN, WORLD_SIZE, 0)[0]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BUCKET_MODELS)), ids=list(BUCKET_MODELS))
def test_predicted_buckets_equal_the_buckets_ddp_builds(runs: list[dict[str, Any]],
                                                         index: int) -> None:
    cfg, n_buckets = list(BUCKET_MODELS.values())[index]
    recording: RankRecording = runs[0]["buckets"][index]
    model = build_model(cfg)
    cap, first = recording.caps_mb
    expected = (25.0, 1.0) if cfg.bucket_cap_mb is None else (cfg.bucket_cap_mb,) * 2
    assert (cap, first) == pytest.approx(expected, rel=1e-3)  # int(MiB * cap) bytes
    x, y = (t[:4] for t in build_dataset(cfg).tensors)
    tensors = grad_tensors(Workload("m", ()), names=param_nbytes(model))
    predicted = build_buckets(tensors, cap, first, gradient_ready_order(model, x, y))
    observed = recording.buckets
    assert len(observed) == n_buckets
    assert [b.params for b in predicted] == [b.params for b in observed]
    assert [b.nbytes for b in predicted] == [b.nbytes for b in observed]
    assert runs[1]["buckets"][index].buckets == observed  # the same on every rank
    # DDP's first guess, the reverse parameter order, is right for Linear layers only
    naive = build_buckets(tensors, cap, first)
    assert ([b.params for b in naive] == [b.params for b in observed]) == (cfg.model == "mlp")
    assert observed[0].params[0] == list(param_nbytes(model))[-1][0]  # the last parameter


@pytest.mark.slow
def test_the_recorded_step_is_a_consistent_trace(runs: list[dict[str, Any]]) -> None:
    recording: RankRecording = runs[0]["buckets"][1]
    trace = Trace("measured", events=recording.steps[-1])
    comm = trace.filter(stream="comm")
    assert [e.nbytes for e in comm] == [b.nbytes for b in recording.buckets]
    backward = trace.filter(kind="backward")
    assert backward[0].label == "8"  # the last layer (Linear) gets its gradients first
    optimizer = trace.filter(kind="optimizer")[0]
    assert all(e.start_s >= backward[0].start_s for e in comm)  # after backward began
    assert all(e.end_s <= optimizer.start_s for e in comm)  # DDP waits for every bucket
    b = step_result(trace)
    assert b.step_s > 0
    assert b.comm_s > 0
    # the first recorded step had a hook on every parameter, the last one on each layer's
    # last parameter only: the same layers, in the same order, and every bucket
    first = Trace("measured", events=recording.steps[0])
    assert len(recording.steps) == 3
    assert [e.label for e in first.filter(kind="backward")] == [e.label for e in backward]
    assert [e.label for e in first.filter(stream="comm")] == [e.label for e in comm]


@pytest.mark.slow
def test_no_sync_accumulates_without_all_reduce(runs: list[dict[str, Any]]) -> None:
    demo = runs[0]["no_sync"]
    assert demo["all_reduce_calls_without_no_sync"] == demo["micro_batches"]
    assert demo["all_reduce_calls_with_no_sync"] == 1
    assert demo["max_grad_difference"] < TOLERANCE
    # losses divided by k: the accumulated gradient is the k-times batch's (not k times it)
    assert demo["max_grad_difference_vs_big_batch"] < TOLERANCE


def test_bad_configs_are_refused_before_launching() -> None:
    with pytest.raises(ValueError, match="model"):
        DDPRunConfig(model="resnet")
    with pytest.raises(ValueError, match="n_features"):
        DDPRunConfig(model="cnn", n_features=50)
    with pytest.raises(ValueError, match="batch_size"):
        DDPRunConfig(n_samples=32, batch_size=20).check_world_size(2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs 2 CUDA GPUs (NCCL, one per rank)")
def test_ddp_over_nccl_matches_one_process() -> None:
    cfg = DDPRunConfig(n_samples=96, batch_size=8, steps=4, progress=False)
    run = run_ddp(cfg, world_size=2, backend="nccl")
    assert run.ranks[0].backend == "nccl"
    assert run.max_rank_difference() == 0.0
    assert max_param_difference(run.ranks[0].params,
                                train_global_batch(cfg, 2).params) < 1e-4  # GPU vs CPU
