"""The instrumented real nn.DataParallel and run_step's choice
(dpsim.labs.ch03_data_parallel.dp_real)."""

from __future__ import annotations

import copy

import pytest
import torch

from dpsim.labs.ch03_data_parallel.dp_real import run_step
from dpsim.labs.ch03_data_parallel.dp_reenact import single_device_step
from dpsim.runtime.data import classification
from dpsim.runtime.dp_cuda_step import cuda_step
from dpsim.runtime.models import mlp
from dpsim.sim.strategies.dp import scatter_sizes

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = classification(64, 32, 10, seed=3).tensors
    return x[:10].clone(), y[:10].clone()


def test_run_step_rejects_an_unknown_mode(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = batch
    with pytest.raises(ValueError, match="mode"):
        run_step(mlp(32, 8, 1, 10), x, y, 2, mode="tpu")


def test_run_step_on_cpu_reenacts(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    if torch.cuda.device_count() >= 2:
        pytest.skip("with two GPUs run_step uses the real nn.DataParallel")
    x, y = batch
    result = run_step(mlp(32, 8, 1, 10), x, y, 2, warmup=1)
    assert "re-enacted" in result.how
    assert result.chunk_sizes == [5, 5]


# --- the real nn.DataParallel (needs CUDA) ----------------------------------------------------


@pytest.mark.gpu
@GPU
def test_real_scatter_matches_chunk_semantics() -> None:
    from torch.nn.parallel.scatter_gather import scatter

    for batch_size, n in [(10, 4), (2, 4), (5, 4)]:
        x = torch.arange(float(batch_size)).cuda()
        chunks = scatter(x, [0] * n)  # n copies onto GPU 0: the sizes are what matter
        assert [c.shape[0] for c in chunks] == scatter_sizes(batch_size, n)


@pytest.mark.gpu
@GPU
def test_real_dataparallel_equals_one_device(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = batch
    n = min(torch.cuda.device_count(), 4)
    model = mlp(32, 48, 2, 10, seed=1).cuda()
    ref = copy.deepcopy(model)
    result = cuda_step(model, x.cuda(), y.cuda(), list(range(n)))
    grads = single_device_step(ref, x.cuda(), y.cuda())
    for name, g in grads.items():
        torch.testing.assert_close(result.gradients[name].cuda(), g, rtol=1e-5, atol=1e-5)
    assert result.trace.source == "measured"
    assert "nn.DataParallel" in result.how
    assert len(result.trace.meta["peak_allocated"]) == n
