"""What chapters 1, 2, 3 and 5 state about torch, pinned against the installed torch.

Chapter 1: non-re-entrant checkpointing keeps only a block's input, runs the block's forward
again in backward (its recomputation stops early: a hook after forward may not fire) and
gives the same gradients. Chapter 2: gloo runs the flat-buffer collectives FSDP uses;
torch 2.13 names them `all_gather_single` / `reduce_scatter_single` and deprecates
`all_gather_into_tensor` / `reduce_scatter_tensor` (torch 2.9 to 2.12 have only the old
names); an NCCL work's `wait()` makes the current stream wait (and, on 2 GPUs, the chapter's
CUDA-event timer and async all-reduce run on NCCL); the chapter's own ring passes exercise
2.3. Chapter 3: `Scatter` copies each chunk of a CPU batch straight to its device (on 2
GPUs: device 0 gets only chunk 0; from a batch already on cuda:0, chunk 0 is a view of it).
Chapter 5: default DDP trains re-entrant checkpointing; a parameter marked ready twice in
one backward (re-entrant checkpointing with find_unused_parameters=True, or a module
checkpointed twice) stops DDP, and static_graph=True accepts it; per-parameter
post-accumulate hooks with async all-reduces give DDP's gradients.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.parallel import comm, scatter
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from dpsim.course.grading import run_check
from dpsim.runtime.launch import launch
from dpsim.runtime.measure import saved_tensors

TORCH = Path(torch.__file__).parent
ROOT = Path(__file__).resolve().parents[2]
TORCH_2_13 = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
READY_TWICE = "Expected to mark a variable ready only once"


# --- chapter 1: activation checkpointing ----------------------------------------------------

def _grad(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None
    return p.grad


def _blocks() -> nn.ModuleList:
    torch.manual_seed(0)
    return nn.ModuleList(nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 32))
                         for _ in range(4))


def _checkpointed_run(checkpointed: bool, early_stop: bool = True
                      ) -> tuple[int, list[int], list[int], torch.Tensor]:
    """(bytes autograd keeps, forward pre-hook runs, forward hook runs, gradients)."""
    blocks = _blocks()
    before, after = [0] * 4, [0] * 4
    for i, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda m, a, i=i: before.__setitem__(i, before[i] + 1))
        block.register_forward_hook(lambda m, a, o, i=i: after.__setitem__(i, after[i] + 1))
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    with set_checkpoint_early_stop(early_stop):
        with saved_tensors(exclude=[x, *blocks.parameters()]) as saved:
            out = x
            for block in blocks:
                out = checkpoint(block, out, use_reentrant=False) if checkpointed else block(out)
        out.square().mean().backward()
    grads = torch.cat([_grad(p).flatten() for p in blocks.parameters()])
    return saved.nbytes, before, after, grads


def test_checkpoint_keeps_only_block_inputs_and_recomputes_in_backward() -> None:
    plain_bytes, plain_runs, _, plain_grads = _checkpointed_run(False)
    kept_bytes, runs, after, grads = _checkpointed_run(True)
    activation, block_out = 64 * 256 * 4, 64 * 32 * 4  # ReLU's output, a block's output
    assert plain_bytes == 4 * activation + 3 * block_out
    assert kept_bytes == 3 * block_out  # the inputs of blocks 1 to 3 (block 0's is x)
    assert plain_runs == [1] * 4
    assert runs == [2] * 4
    assert after == [1] * 4  # the recomputation stopped before the block's forward returned
    assert torch.equal(grads, plain_grads)


def test_without_early_stop_the_recomputation_runs_the_whole_forward() -> None:
    _, runs, after, _ = _checkpointed_run(True, early_stop=False)
    assert runs == [2] * 4
    assert after == [2] * 4


# --- chapter 2: the flat-buffer collectives and NCCL's streams ------------------------------

def test_single_names_exist_exactly_from_2_13() -> None:
    for name in ("all_gather_single", "reduce_scatter_single"):
        assert hasattr(dist, name) == TORCH_2_13, name
    for name in ("all_gather_into_tensor", "reduce_scatter_tensor"):
        assert callable(getattr(dist, name))


def test_flat_collectives_run_on_gloo_and_warn_from_2_13(group: None) -> None:
    out, flat = torch.zeros(2), torch.tensor([1.0, 2.0])
    for old, new, args in (("reduce_scatter_tensor", "reduce_scatter_single", (out, flat)),
                           ("all_gather_into_tensor", "all_gather_single", (out, flat))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(dist, old)(*args)
        assert out.tolist() == [1.0, 2.0], old
        told = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
        if TORCH_2_13:
            assert any(f"`torch.distributed.{old}` is deprecated" in m and new in m
                       for m in told), told
            getattr(dist, new)(*args)
        else:
            assert not told, told


def _flat_on_ranks(rank: int, world_size: int) -> tuple[list[float], list[float]]:
    mine = torch.tensor([1.0, 2.0]) + 10 * rank
    pieces = torch.cat([mine + 100 * i for i in range(world_size)])
    gathered, reduced = torch.zeros(2 * world_size), torch.zeros(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_into_tensor(gathered, mine)
        dist.reduce_scatter_tensor(reduced, pieces)
    return gathered.tolist(), reduced.tolist()


@pytest.mark.slow
def test_flat_collectives_on_two_gloo_ranks() -> None:
    results = launch(_flat_on_ranks, 2, backend="gloo")
    for rank, (gathered, reduced) in enumerate(results):
        assert gathered == [1.0, 2.0, 11.0, 12.0]
        assert reduced == [12.0 + 200 * rank, 14.0 + 200 * rank]


def test_nccl_work_wait_orders_streams_and_does_not_block_the_host() -> None:
    header = TORCH / "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
    text = " ".join(header.read_text(encoding="utf-8").split())
    assert "each NCCL call is scheduled on a separate CUDA stream" in text
    assert "// Let current stream wait on the completion of the NCCL work" in text
    assert "Same as calling synchronize() for NCCL work if timeout is not set." in text
    assert "TORCH_NCCL_BLOCKING_WAIT" in text


def _chapter_cell(notebook: str, needle: str) -> str:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"]
             if c["cell_type"] == "code" and needle in "".join(c["source"])]
    assert len(cells) == 1, (notebook, needle, len(cells))
    return cells[0]


@pytest.mark.slow
def test_the_chapters_ring_passes_exercise_2_3() -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch, "dist": dist}
    exec(_chapter_cell("02_collectives.ipynb", "def ring_all_reduce("), namespace)
    result = run_check("2.3", namespace["ring_all_reduce"])
    assert result.ok, result.message


def _nccl_on_ranks(rank: int, world_size: int, timer: Any, double: Any
                   ) -> tuple[float, list[float]]:
    device = torch.device("cuda", torch.cuda.current_device())
    dist.all_reduce(torch.zeros(1, device=device))  # warm-up: NCCL's communicator
    seconds = timer(dist.all_reduce, torch.zeros(2**22, device=device))  # 16 MiB
    return seconds, double(rank, world_size)


@pytest.mark.gpu
@pytest.mark.slow
@TWO_GPUS
def test_the_chapters_cuda_timer_and_async_all_reduce_on_nccl() -> None:
    namespace: dict[str, Any] = {"__name__": "__main__", "torch": torch, "dist": dist,
                                 "launch": launch, "WORLD_SIZE": 2}
    exec(_chapter_cell("02_collectives.ipynb", "def slowest_rank_cuda_s("), namespace)
    results = launch(_nccl_on_ranks, 2, args=(namespace["slowest_rank_cuda_s"],
                                              namespace["sum_then_double"]))
    for seconds, doubled in results:
        assert 0.0 < seconds < 10.0
        assert doubled == [6.0, 6.0]  # (1 + 2) x 2: the x2 ran after the sum on the stream


# --- chapter 3: Scatter from a CPU batch ------------------------------------------------------

def test_scatter_copies_each_chunk_of_a_cpu_batch_to_its_device() -> None:
    source = (TORCH / "nn/parallel/_functions.py").read_text(encoding="utf-8")
    body = source[source.index("class Scatter(Function):"):]
    end = body.find("\nclass ", 1)
    body = body if end < 0 else body[:end]
    assert 'ctx.input_device = input.get_device() if input.device.type != "cpu" else -1' in body
    assert "# Perform CPU to GPU copies in a background stream" in body
    assert "outputs = comm.scatter(input, target_gpus, chunk_sizes, ctx.dim, streams)" in body
    doc = " ".join((comm.scatter.__doc__ or "").split())
    assert "tensor (Tensor): tensor to scatter. Can be on CPU or GPU." in doc
    assert "a tuple containing chunks of :attr:`tensor`, placed on :attr:`devices`" in doc


@pytest.mark.gpu
@TWO_GPUS
def test_scatter_from_a_cpu_batch_puts_only_chunk_0_on_device_0() -> None:
    batch = torch.zeros(4, 2**18)  # 4 MiB: two chunks of 2 MiB
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(0)
    chunks = scatter(batch, [0, 1])
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(0) - before == batch.nbytes // 2 == chunks[0].nbytes
    on_device_0 = batch.to("cuda:0")  # the batch moved to cuda:0 first: all of it is there
    before = torch.cuda.memory_allocated(0)
    chunks = scatter(on_device_0, [0, 1])
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(0) == before  # chunk 0 is a view of it
    assert chunks[0].data_ptr() == on_device_0.data_ptr()


# --- chapter 5: re-entrant checkpointing, hooks and async all-reduces -----------------------

class _Checkpointed(nn.Module):
    """A stem, two re-entrant checkpointed blocks (block 0 twice when `twice`), a head."""

    def __init__(self, twice: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Linear(12, 12)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(12, 12), nn.ReLU())
                                    for _ in range(2))
        self.head, self.twice = nn.Linear(12, 3), twice

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in list(self.blocks) + [self.blocks[0]] * self.twice:
            x = checkpoint(block, x, use_reentrant=True)
        return self.head(x)


def _batch(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return torch.randn(6, 12, generator=g), torch.randint(0, 3, (6,), generator=g)


def _outcome(model: nn.Module, rank: int, steps: int = 3) -> str:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        opt.zero_grad()
        try:
            F.cross_entropy(model(_batch(10 * rank + step)[0]),
                            _batch(10 * rank + step)[1]).backward()
        except RuntimeError as error:
            return str(error)
        opt.step()
    return "trained"


def _reentrant_on_ranks(rank: int, world_size: int) -> dict[str, Any]:
    options: dict[str, dict[str, Any]] = {
        "default": {}, "find_unused": {"find_unused_parameters": True},
        "static_graph": {"static_graph": True}}
    out: dict[str, Any] = {f"{name}, twice={twice}": _outcome(DDP(_Checkpointed(twice), **o),
                                                              rank)
                           for twice in (False, True) for name, o in options.items()}
    model = DDP(_Checkpointed())
    x, y = _batch(rank)
    F.cross_entropy(model(x), y).backward()
    one = _Checkpointed()
    xs, ys = (torch.cat(t) for t in zip(*(_batch(r) for r in range(world_size)), strict=True))
    F.cross_entropy(one(xs), ys).backward()
    out["difference"] = max((_grad(p) - _grad(q)).abs().max().item()
                            for p, q in zip(model.module.parameters(), one.parameters(),
                                                strict=True))
    return out


@pytest.fixture(scope="module")
def reentrant() -> list[dict[str, Any]]:
    return launch(_reentrant_on_ranks, 2, backend="gloo")


@pytest.mark.slow
def test_default_ddp_trains_reentrant_checkpointing_like_one_process(
        reentrant: list[dict[str, Any]]) -> None:
    for rank in reentrant:
        assert rank["default, twice=False"] == "trained"
        assert rank["difference"] <= 1e-6


@pytest.mark.slow
def test_a_parameter_ready_twice_stops_ddp_unless_static_graph(
        reentrant: list[dict[str, Any]]) -> None:
    for rank in reentrant:
        for key in ("find_unused, twice=False", "default, twice=True", "find_unused, twice=True"):
            assert rank[key].startswith(READY_TWICE), (key, rank[key][:200])
            assert "has been marked as ready twice" in rank[key], key
        for key in ("static_graph, twice=False", "static_graph, twice=True"):
            assert rank[key] == "trained", (key, rank[key][:200])


def test_ddp_docstring_on_reentrant_checkpointing() -> None:
    doc = " ".join((DDP.__doc__ or "").split())
    assert ("If, however, the checkpoint is done with use_reentrant=True (the default), DDP "
            "will work as expected when there are no unused parameters in the model and each "
            "layer is checkpointed at most once (make sure you are not passing "
            "`find_unused_parameters=True` to DDP).") in doc
    assert re.search(r"static_graph.*2\) Activation checkpointing multiple times", doc)
    header = TORCH / "include/torch/csrc/distributed/c10d/reducer.hpp"
    assert "autograd_hook() should be triggered before marking this variable's grad as" \
        in header.read_text(encoding="utf-8")


def _hand_ddp_on_ranks(rank: int, world_size: int) -> tuple[list[int], float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3))
    reference = DDP(nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 3)))
    reference.module.load_state_dict(model.state_dict())
    pending: list[tuple[torch.Tensor, Any]] = []  # (gradient, work handle)
    started_at: list[int] = []  # how many hooks had run when each all-reduce started

    def start(p: torch.Tensor) -> None:
        pending.append((_grad(p), dist.all_reduce(_grad(p), async_op=True)))
        started_at.append(len(pending))

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(start)
    x, y = _batch(rank)
    F.cross_entropy(model(x), y).backward()
    for grad, work in pending:
        work.wait()
        grad /= world_size
    F.cross_entropy(reference(x), y).backward()
    return started_at, max((_grad(p) - _grad(q)).abs().max().item()
                           for p, q in zip(model.parameters(),
                                               reference.module.parameters(), strict=True))


@pytest.mark.slow
def test_post_accumulate_hooks_with_async_all_reduce_give_ddps_gradients() -> None:
    for started_at, difference in launch(_hand_ddp_on_ranks, 2, backend="gloo"):
        assert started_at == [1, 2, 3, 4]  # one all-reduce per parameter, in backward
        assert difference <= 1e-6


def test_post_accumulate_grad_hook_runs_once_the_gradient_is_final() -> None:
    w = torch.ones(3, requires_grad=True)
    seen: list[list[float]] = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
    (2 * w).sum().backward()
    (3 * w).sum().backward()  # accumulates: the hook sees the sum
    assert seen == [[2.0] * 3, [5.0] * 3]
