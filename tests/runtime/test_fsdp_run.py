"""Real FSDP2 on gloo ranks: measured shard bytes == predicted, and FSDP == one process."""

from __future__ import annotations

import pytest
import torch

from dpsim.runtime.fsdp_builders import MODELS, TOLERANCE, check_mesh, fsdp_model, param_shapes
from dpsim.runtime.fsdp_run import FSDPRun, run_fsdp, run_fsdp_models
from dpsim.sim.cost.fsdp_shards import fsdp_rank_bytes


@pytest.fixture(scope="module", params=[2, 3], ids=["world_size=2", "world_size=3"])
def runs(request: pytest.FixtureRequest) -> dict[str, FSDPRun]:
    """One launch per world size trains both models (3 steps, 4 samples per rank)."""
    return run_fsdp_models(request.param, MODELS, steps=3, batch_size=4, timeout_s=180.0)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_measured_shard_bytes_equal_prediction(runs: dict[str, FSDPRun], model: str) -> None:
    run = runs[model]
    assert len(run.measured) == run.world_size
    for rank in range(run.world_size):
        assert run.measured[rank] == run.predicted[rank], f"rank {rank} local shards"
        assert run.measured_padded[rank] == run.predicted_padded[rank], f"rank {rank} padded"
    assert run.matches_prediction
    # the models are built so that some shard is padded: the check is not vacuous
    assert any(m.parameters < p.parameters
               for m, p in zip(run.measured, run.measured_padded, strict=True))
    total = sum(p.numel() for p in fsdp_model(model).parameters()) * 4
    assert sum(m.parameters for m in run.measured) == total


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_fsdp_trains_the_same_model_as_one_process(runs: dict[str, FSDPRun], model: str
                                                   ) -> None:
    run = runs[model]
    assert run.single_params is not None
    assert run.single_losses is not None
    assert set(run.params) == set(run.single_params)
    assert run.max_abs_diff <= TOLERANCE
    assert run.losses == pytest.approx(run.single_losses, abs=1e-5)
    start = fsdp_model(model)
    moved = max(float((run.params[n] - p.detach()).abs().max())
                for n, p in start.named_parameters())
    assert moved > 100 * TOLERANCE  # training changed the parameters: equality means something


@pytest.mark.slow
def test_measured_timeline_has_fsdp_collectives(runs: dict[str, FSDPRun]) -> None:
    trace = runs["residual"].trace
    assert trace is not None
    assert trace.source == "measured"
    assert trace.devices == list(range(runs["residual"].world_size))
    for rank in trace.devices:
        kinds = {e.kind for e in trace.filter(device=rank)}
        assert {"all_gather", "reduce_scatter", "forward", "backward", "optimizer"} <= kinds
        gathers = [e.label for e in trace.filter(device=rank, kind="all_gather")]
        # a block is all-gathered before its forward and again for its backward; the root
        # keeps its parameters after forward (reshard_after_forward=False), so only once
        assert gathers.count("blocks.0") == 2
        assert gathers.count("root") == 1


def test_prediction_for_an_uneven_layer() -> None:
    shapes = param_shapes(fsdp_model("mlp"))
    assert shapes[0] == (37, 13)
    rank2 = fsdp_rank_bytes(shapes, 3, 2)
    rank0 = fsdp_rank_bytes(shapes, 3, 0)
    assert rank2.parameters < rank0.parameters  # 37 rows -> 13, 13, 11


def test_mesh_that_does_not_match_world_size_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="mesh_size=3 does not match world_size=2"):
        run_fsdp(2, mesh_size=3)
    assert check_mesh(4, 4) == 4
    with pytest.raises(ValueError, match="model"):
        run_fsdp(2, model="gpt")
    with pytest.raises(ValueError, match="world_size"):
        check_mesh(0, None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fsdp_on_gpus_measures_cuda_memory() -> None:
    world_size = min(2, torch.cuda.device_count())
    run = run_fsdp(world_size, "residual", steps=2)
    assert run.device.startswith("cuda")
    assert run.matches_prediction
    assert all(c is not None and c["peak_allocated"] > 0 for c in run.cuda)
    assert run.max_abs_diff <= 1e-4  # TF32 and cuBLAS sums may differ from the CPU reference


def test_cuda_sampler_hooks_fire_in_forward_and_backward() -> None:
    """The GPU memory sampler's mechanics, on CPU (memory_allocated reads 0 without CUDA)."""
    from dpsim.runtime.fsdp_builders import blocks_of
    from dpsim.runtime.fsdp_record import CudaSampler
    from dpsim.sim.trace import Trace

    model = fsdp_model("residual")
    blocks = blocks_of(model)
    sampler = CudaSampler(blocks, rank=1)
    model(torch.randn(4, 13)).sum().backward()
    trace = sampler.close(Trace("measured"))
    assert len(trace.memory) == 1 + 3 * len(blocks) + 1  # start, pre/post/grad per block, end
    assert trace.devices == [1]
    assert [m.time_s for m in trace.memory] == sorted(m.time_s for m in trace.memory)
    model(torch.randn(2, 13))  # hooks removed: nothing more is sampled
    assert len(sampler.samples) == 2 + 3 * len(blocks)
