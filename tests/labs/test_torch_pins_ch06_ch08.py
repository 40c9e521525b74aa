"""What chapters 6 and 8 teach about torch, read from (or run on) the installed torch.

Chapter 6: gradient accumulation under FSDP2 still all-gathers every micro-batch, and the
three knobs that trade memory for traffic; a step without `zero_grad()` accumulates
(exercise 6.6). Chapter 8: DDP's comm hooks (fp16 halves the bytes, bf16 is refused without
NCCL, PowerSGD sends low-rank factors), `torch.compile` splitting DDP's graph at its buckets.
Each test fails when torch changes the behaviour the chapter states.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

TORCH = Path(torch.__file__).resolve().parent
MODES = ("sync", "no sync", "no reshard after backward", "no reshard at all")


def _source(relative: str) -> str:
    return (TORCH / relative).read_text(encoding="utf-8")


def test_fsdp2_has_the_accumulation_knobs() -> None:
    from torch.distributed.fsdp import FSDPModule

    for name in ("set_requires_gradient_sync", "set_reshard_after_backward",
                 "set_reshard_after_forward"):
        assert callable(getattr(FSDPModule, name)), name
    doc = " ".join((FSDPModule.set_reshard_after_backward.__doc__ or "").split())
    assert "trade off higher memory for reduced communication" in doc


def test_optimize_ddp_defaults_to_the_ddp_optimizer() -> None:
    assert torch._dynamo.config.optimize_ddp is True
    src = _source("_dynamo/backends/distributed.py")
    assert "class DDPOptimizer" in src
    assert "split model graph into pieces to match DDP bucket sizes" in _source(
        "_dynamo/config.py")


def test_bf16_compress_hook_is_refused_without_nccl_by_ddp() -> None:
    src = _source("nn/parallel/distributed.py")
    assert "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+" in src


def test_powersgd_state_takes_the_arguments_chapter_8_uses() -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    params = inspect.signature(powerSGD_hook.PowerSGDState).parameters
    for name in ("process_group", "matrix_approximation_rank", "start_powerSGD_iter",
                 "use_error_feedback", "random_seed"):
        assert name in params, name
    assert params["use_error_feedback"].default is True


def _fsdp_accumulation(rank: int, world_size: int) -> dict[str, Any]:
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from dpsim.runtime.collective_bytes import CollectiveBytes

    mesh = init_device_mesh("cpu", (world_size,))
    out: dict[str, Any] = {}
    for mode in MODES:
        torch.manual_seed(0)
        model: Any = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh, reshard_after_forward=False)
        model.set_reshard_after_forward(mode != "no reshard at all")
        x = torch.randn(16, 8, generator=torch.Generator().manual_seed(rank))
        with CollectiveBytes() as comm:
            for m in range(4):
                if mode != "sync":
                    model.set_requires_gradient_sync(m == 3)
                if mode.startswith("no reshard"):
                    model.set_reshard_after_backward(m == 3)
                F.mse_loss(model(x[4 * m:4 * m + 4]), torch.zeros(4, 4)).backward()
        out[mode] = comm.calls_by_kind()
    # no zero_grad between two steps: the second backward adds to the first (exercise 6.6)
    torch.manual_seed(0)
    model = fully_shard(nn.Linear(8, 4), mesh=mesh)
    x = torch.randn(4, 8)
    model(x).sum().backward()
    once = model.weight.grad.full_tensor().clone()
    model(x).sum().backward()
    out["twice_over_once"] = float((model.weight.grad.full_tensor() / once).mean())
    # blocks compiled, then fully_shard: each graph holds the block's ops, no collective
    for needs_grad in (False, True):
        graphs: list[list[str]] = []

        def counting(gm: Any, example_inputs: Any, graphs: list[list[str]] = graphs) -> Any:
            graphs.append([getattr(n.target, "__name__", str(n.target))
                           for n in gm.graph.nodes if n.op == "call_function"])
            return gm.forward

        torch._dynamo.reset()
        model = nn.Sequential(*[_Block() for _ in range(4)])
        for block in model:
            block.compile(backend=counting)
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model(torch.randn(8, 16, requires_grad=needs_grad)).sum().backward()
        out[f"compiled blocks, input needs grad={needs_grad}"] = graphs
    return out


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.lin(x))


def _ddp_hooks_and_compile(rank: int, world_size: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpsim.runtime.collective_bytes import CollectiveBytes

    out: dict[str, Any] = {}
    try:
        DDP(nn.Linear(2, 2)).register_comm_hook(None, default_hooks.bf16_compress_hook)
        out["bf16"] = "registered"
    except TypeError as e:
        out["bf16"] = str(e)
    for hook in ("allreduce_hook", "fp16_compress_hook", "powerSGD_hook"):
        torch.manual_seed(0)
        ddp = DDP(nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 8)))
        if hook == "powerSGD_hook":
            state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                                start_powerSGD_iter=2, random_seed=0)
            ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        else:
            ddp.register_comm_hook(None, getattr(default_hooks, hook))
        sent = []
        for _ in range(4):
            ddp.zero_grad()
            loss = ddp(torch.randn(4, 32)).square().mean()
            with CollectiveBytes() as comm:
                loss.backward()
            sent.append(comm.bytes_by_kind().get("all_reduce", 0))
        out[hook] = sent

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    graphs: list[int] = []

    def counting(gm: Any, example_inputs: Any) -> Any:
        graphs.append(sum(getattr(n.target, "__name__", "") == "linear" for n in gm.graph.nodes))
        return gm.forward

    torch._dynamo.reset()
    torch.manual_seed(0)
    stack = Stack()
    torch.compile(DDP(stack, bucket_cap_mb=2), backend=counting)(
        torch.randn(4, 512)).sum().backward()
    out["graphs"] = list(graphs)
    params: list[torch.Tensor] = list(reversed(list(stack.parameters())))
    buckets, _ = dist._compute_bucket_assignment_by_size(  # DDP's own assignment
        params, [dist._DEFAULT_FIRST_BUCKET_BYTES, 2 * 1024 * 1024], [False] * len(params))
    out["layers_per_bucket"] = [len(b) // 2 for b in buckets]  # a weight and a bias a layer
    return out


@pytest.fixture(scope="module")
def fsdp_counts() -> dict[str, Any]:
    from dpsim.runtime.launch import launch

    return launch(_fsdp_accumulation, 2, device="cpu")[0]


@pytest.fixture(scope="module")
def ddp_runs() -> dict[str, Any]:
    from dpsim.runtime.launch import launch

    return launch(_ddp_hooks_and_compile, 2, device="cpu")[0]


@pytest.mark.slow
def test_fsdp2_accumulation_still_all_gathers(fsdp_counts: dict[str, Any]) -> None:
    """3 units, 4 micro-batches: 2 gathers and 1 reduce-scatter a unit a micro-batch."""
    assert fsdp_counts["sync"] == {"all_gather": 24, "reduce_scatter": 12}
    assert fsdp_counts["no sync"] == {"all_gather": 24, "reduce_scatter": 3}
    assert fsdp_counts["no reshard after backward"] == {"all_gather": 15, "reduce_scatter": 3}
    assert fsdp_counts["no reshard at all"] == {"all_gather": 3, "reduce_scatter": 3}


@pytest.mark.slow
def test_fsdp2_gradients_accumulate_without_zero_grad(fsdp_counts: dict[str, Any]) -> None:
    assert fsdp_counts["twice_over_once"] == pytest.approx(2.0)


@pytest.mark.slow
def test_fsdp2_compiled_blocks_keep_collectives_out(fsdp_counts: dict[str, Any]) -> None:
    """A graph per distinct input (a first block whose input needs no grad recompiles)."""
    for needs_grad, n_graphs in ((False, 2), (True, 1)):
        graphs = fsdp_counts[f"compiled blocks, input needs grad={needs_grad}"]
        assert len(graphs) == n_graphs
        assert all(ops == ["linear", "tanh", "add"] for ops in graphs), graphs


@pytest.mark.slow
def test_compression_hooks_bytes(ddp_runs: dict[str, Any]) -> None:
    params = 32 * 64 + 64 + 64 * 8 + 8
    assert ddp_runs["allreduce_hook"] == [4 * params] * 4
    assert ddp_runs["fp16_compress_hook"] == [2 * params] * 4
    biases, factors = 64 + 8, 2 * (64 + 32) + 2 * (8 + 64)  # P and Q, rank 2, per matrix
    assert ddp_runs["powerSGD_hook"] == [4 * params] * 2 + [4 * (biases + factors)] * 2
    if not torch.cuda.is_available():
        assert "NCCL 2.10+" in ddp_runs["bf16"]


@pytest.mark.slow
def test_compiled_ddp_has_a_graph_per_bucket(ddp_runs: dict[str, Any]) -> None:
    assert ddp_runs["graphs"] == ddp_runs["layers_per_bucket"] == [1, 2, 2, 2, 1]
