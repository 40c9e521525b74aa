"""The CPU stand-ins of torch.nn.parallel (dpsim.labs.ch03_data_parallel.cpu_parallel)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpsim.labs.ch03_data_parallel import cpu_parallel as P


def test_scatter_is_torch_chunk_and_copies_all_but_chunk0() -> None:
    x = torch.arange(20.0).reshape(10, 2)
    chunks = P.scatter(x, [0, 1, 2, 3])
    assert [c.shape[0] for c in chunks] == [3, 3, 3, 1]
    assert chunks[0].data_ptr() == x.data_ptr()
    assert all(c.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
               for c in chunks[1:])
    assert [c.shape[1] for c in P.scatter(torch.zeros(2, 6, 3), [0, 1, 2], dim=1)] == [2, 2, 2]


def test_step_by_hand_sums_gradients_like_one_device() -> None:
    torch.manual_seed(0)
    model, ref = nn.Linear(4, 3), nn.Linear(4, 3)
    ref.load_state_dict(model.state_dict())
    x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    inputs = P.scatter(x, [0, 1, 2, 3])
    outputs = P.parallel_apply(P.replicate(model, [0, 1, 2, 3]), inputs)
    nn.functional.cross_entropy(P.gather(outputs, 0), y).backward()
    nn.functional.cross_entropy(ref(x), y).backward()
    assert model.weight.grad is not None
    assert ref.weight.grad is not None
    assert torch.allclose(model.weight.grad, ref.weight.grad, atol=1e-6)


def test_only_replica0_buffer_updates_reach_the_module() -> None:
    bn, chunk0 = nn.BatchNorm1d(2), nn.BatchNorm1d(2)
    x = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    P.parallel_apply(P.replicate(bn, [0, 1]), P.scatter(x, [0, 1]))
    chunk0(x[:4])
    assert bn.running_mean is not None
    assert chunk0.running_mean is not None
    assert torch.allclose(bn.running_mean, chunk0.running_mean)


def test_parallel_apply_reraises_a_replica_error() -> None:
    with pytest.raises(RuntimeError):
        P.parallel_apply([nn.Linear(4, 3)], [torch.zeros(2, 5)])


@pytest.mark.parametrize("devices", [[], "01", None])
def test_bad_devices_name_the_field(devices: object) -> None:
    with pytest.raises(ValueError, match="devices="):
        P.scatter(torch.zeros(4), devices)  # type: ignore[arg-type]
