"""What chapters 9 and 10 teach about torch, read from (or run on) the installed torch.

Each test fails when torch changes the behaviour the chapter states.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch import nn

TORCH = Path(torch.__file__).resolve().parent


def _source(relative: str) -> str:
    return (TORCH / relative).read_text(encoding="utf-8")


def test_fsdp2_reduce_dtype_none_reduces_in_the_compute_dtype() -> None:
    """Chapter 9: MixedPrecisionPolicy(reduce_dtype=None) reduces in param_dtype."""
    api = _source("distributed/fsdp/_fully_shard/_fsdp_api.py")
    said = " ".join(api.split())  # the docstring, its line breaks folded
    assert ("If this is ``None`` but ``param_dtype`` is not ``None``, then the reduction "
            "uses the compute dtype.") in said
    collectives = _source("distributed/fsdp/_fully_shard/_fsdp_collectives.py")
    assert "reduce_dtype = reduce_dtype or grad_dtype" in collectives
    from torch.distributed.fsdp import MixedPrecisionPolicy

    assert MixedPrecisionPolicy().reduce_dtype is None


def test_cpu_autocast_runs_softmax_and_layer_norm_in_bf16() -> None:
    """Chapter 9: on the CPU, softmax and layer_norm follow their input (bf16 after a
    matmul); CUDA's autocast lists them as fp32 ops."""
    a, b = torch.randn(4, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = a @ b
        assert h.dtype == torch.bfloat16
        assert torch.softmax(h, -1).dtype == torch.bfloat16
        assert nn.functional.layer_norm(h, (8,)).dtype == torch.bfloat16
        assert torch.softmax(a, -1).dtype == torch.float32


def test_dtensor_rng_is_supported_only_on_cuda_like_meshes() -> None:
    """Chapter 9: meta-device init + reset_parameters on a CPU mesh is not coordinated."""
    src = _source("distributed/tensor/_random.py")
    assert "Currently we only support correct RNG on cuda/cuda-like devices." in src
    assert 'hasattr(device_handle, "set_rng_state")' in src


def test_nccl_timeout_aborts_the_process() -> None:
    """Chapter 10: under NCCL a timed-out collective is aborted and the process crashes."""
    src = _source("distributed/distributed_c10d.py")
    assert ("This is the duration after which collectives will be aborted asynchronously "
            "and the process will crash.") in src
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in src  # the flight recorder's buffer


def test_join_passes_divide_by_initial_world_size_to_ddp() -> None:
    """Chapter 10: Join(..., divide_by_initial_world_size=...) reaches DDP's join hook."""
    from torch.nn.parallel import DistributedDataParallel

    hook = inspect.signature(DistributedDataParallel.join_hook)
    assert "kwargs" in hook.parameters
    assert "divide_by_initial_world_size" in inspect.getsource(DistributedDataParallel.join_hook)
    assert inspect.signature(DistributedDataParallel.join).parameters[
        "divide_by_initial_world_size"].default is True


def test_zero_redundancy_optimizer_needs_consolidating_before_state_dict() -> None:
    """Chapter 10: ZeroRedundancyOptimizer.state_dict() raises until consolidate_state_dict."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    src = inspect.getsource(ZeroRedundancyOptimizer.state_dict)
    assert "Optimizer state has not been consolidated on this rank" in src
    assert "consolidate_state_dict" in src


def test_sync_batch_norm_gathers_mean_invstd_and_count() -> None:
    """Chapter 10: SyncBatchNorm all-gathers (mean, invstd, count) per layer."""
    src = _source("nn/modules/_functions.py")
    assert "mean, invstd = torch.batch_norm_stats(input, eps)" in src
    assert "combined = torch.cat([mean, invstd, count], dim=0)" in src
