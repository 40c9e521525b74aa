"""What chapter 13 teaches about torch, run on the installed torch (one gloo rank in this
process): when DDP's forward broadcasts its buffers, that creating a DataLoader's iterator
draws from torch's global generator, and where DistributedSampler puts its padded copies.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dpsim.labs.ch13_training_at_scale.data import PAD, regression_dataset, token_batches
from dpsim.labs.ch13_training_at_scale.sample_log import replayed_and_skipped


@pytest.fixture
def broadcasts(group: None, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts DDP's calls of dist._broadcast_coalesced (its buffer and parameter broadcast)."""
    calls: list[int] = []
    real = dist._broadcast_coalesced

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "_broadcast_coalesced", counted)
    return calls


DATA = TensorDataset(torch.arange(8))
# torch 2.13 renamed broadcast_buffers (deprecated) forward_sync_buffers; both default True
SYNC_FLAG = ("forward_sync_buffers" if "forward_sync_buffers" in
             inspect.signature(DDP.__init__).parameters else "broadcast_buffers")


def _bn_model(sync_buffers: bool = True, buffers: bool = True) -> DDP:
    torch.manual_seed(0)
    norm = nn.BatchNorm1d(8) if buffers else nn.Identity()
    flag: dict[str, Any] = {} if sync_buffers else {SYNC_FLAG: False}
    return DDP(nn.Sequential(nn.Linear(4, 8), norm, nn.Linear(8, 2)), **flag)


def _forward_broadcasts(calls: list[int], model: nn.Module, grad: bool) -> int:
    before = len(calls)
    with torch.set_grad_enabled(grad):
        out = model(torch.randn(6, 4))
    if grad:
        out.sum().backward()
    return len(calls) - before


def test_ddp_forward_broadcasts_buffers_when_require_forward_param_sync_is_set(
        broadcasts: list[int]) -> None:
    """Chapter 13, section 3: set at construction and by a grad-enabled forward, cleared by
    a no_grad forward; model.eval() changes nothing; model.module starts no collective."""
    model = _bn_model()
    assert _forward_broadcasts(broadcasts, model, grad=False) == 1  # after construction
    assert _forward_broadcasts(broadcasts, model, grad=False) == 0  # cleared by no_grad
    assert _forward_broadcasts(broadcasts, model, grad=True) == 0  # still cleared ...
    model.eval()  # ... and set again by that training forward
    assert _forward_broadcasts(broadcasts, model, grad=False) == 1  # the evaluation's
    model.train()
    assert _forward_broadcasts(broadcasts, model, grad=True) == 0
    assert _forward_broadcasts(broadcasts, model.module, grad=False) == 0


@pytest.mark.parametrize(("sync_buffers", "buffers"), [(False, True), (True, False)])
def test_no_buffer_broadcast_without_buffers_or_with_the_sync_flag_false(
        broadcasts: list[int], sync_buffers: bool, buffers: bool) -> None:
    model = _bn_model(sync_buffers, buffers)
    _forward_broadcasts(broadcasts, model, grad=True)
    assert _forward_broadcasts(broadcasts, model, grad=False) == 0


def test_the_rule_is_read_from_ddp_source() -> None:
    src = inspect.getsource(DDP.will_sync_module_buffers)
    for name in ("require_forward_param_sync", SYNC_FLAG, "modules_buffers"):
        assert name in src
    assert "_check_sync_bufs_pre_fwd()" in inspect.getsource(DDP._pre_forward)


def test_creating_a_loader_iterator_draws_from_the_global_generator() -> None:
    torch.manual_seed(0)
    plain = torch.rand(1)
    torch.manual_seed(0)
    iter(DataLoader(DATA))
    moved = torch.rand(1)
    torch.manual_seed(0)
    iter(DataLoader(DATA, generator=torch.Generator()))
    kept = torch.rand(1)
    assert not torch.equal(plain, moved)
    assert torch.equal(plain, kept)


@pytest.mark.parametrize(("n", "world_size"), [(10, 3), (10, 4), (13, 4), (9, 3)])
def test_distributed_sampler_pads_with_copies_at_positions_from_n_on(n: int,
                                                                     world_size: int) -> None:
    """Rank r's i-th index sits at position i * N + r of the padded list; the positions from
    n on hold the copies, so masking them leaves every sample exactly once."""
    kept = []
    for rank in range(world_size):
        idx: list[int] = list(DistributedSampler(TensorDataset(torch.arange(n)), world_size,
                                                 rank, shuffle=True, seed=1))
        kept += [i for k, i in enumerate(idx) if k * world_size + rank < n]
    assert sorted(kept) == list(range(n))


def test_the_chapters_data() -> None:
    x, y = regression_dataset().tensors
    assert x.shape == (1024, 16)
    assert y.shape == (1024, 1)
    batches = token_batches(2, seed=0)
    tokens = [int((t != PAD).sum()) for _, t in batches]
    assert tokens[0] < tokens[1]  # rank 0 holds short sequences, rank 1 long ones
    assert replayed_and_skipped([1, 2, 2, 3], [1, 2, 3, 4]) == (1, 1)
    with pytest.raises(ValueError, match="world_size"):
        token_batches(0)
