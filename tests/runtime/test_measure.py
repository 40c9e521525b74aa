"""Bytes of real tensors (dpsim.runtime.measure): one counter of what autograd saves."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dpsim.runtime.measure import saved_tensors, storage_bytes, tensor_bytes


def test_tensor_and_storage_bytes() -> None:
    x = torch.zeros(6, 4)
    assert tensor_bytes(x) == tensor_bytes(x[:3]) * 2 == 96
    assert storage_bytes([x, x[:3], x.t()]) == 96  # one storage, counted once
    assert storage_bytes([x, torch.zeros(0), torch.ones(2, dtype=torch.int64)]) == 96 + 16


def test_saved_view_or_whole_storage() -> None:
    """A saved view counts its own bytes under size="view", its storage's under "storage"."""
    base = torch.randn(8, 4)
    w = torch.randn(4, 3, requires_grad=True)
    with saved_tensors([w]) as whole:
        base[:2] @ w
    with saved_tensors([w], size="view") as view:
        base[:2] @ w
    assert (whole.nbytes, view.nbytes) == (8 * 4 * 4, 2 * 4 * 4)


def test_parameters_excluded_and_scalars_optional() -> None:
    model = nn.Linear(5, 3)
    x, y = torch.randn(4, 5), torch.tensor([0, 1, 2, 0])
    counts = {}
    for scalars in (True, False):
        with saved_tensors(model.parameters(), scalars=scalars) as saved:
            F.cross_entropy(model(x), y)
        counts[scalars] = saved.nbytes
    # the input, log-softmax of the logits, the int64 targets; nll_loss's 0-dim total_weight
    assert counts[False] == 4 * 4 * 5 + 4 * 4 * 3 + 8 * 4
    assert counts[True] == counts[False] + 4
