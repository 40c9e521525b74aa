"""DataParallel re-enacted on CPU threads over virtual devices
(dpsim.labs.ch03_data_parallel.dp_reenact)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dpsim.labs.ch03_data_parallel.dp_reenact import (
    reenact_step,
    replicate_module,
    single_device_step,
)
from dpsim.runtime.capture import workload_from_module
from dpsim.runtime.data import classification
from dpsim.runtime.models import mlp
from dpsim.runtime.optimizers import build_optimizer
from dpsim.sim.strategies.dp import DPConfig, bytes_at_loss, scatter_sizes
from dpsim.viz.memory_per_device import bytes_at
from dpsim.viz.scatter_gather import phase_steps


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    x, y = classification(64, 32, 10, seed=3).tensors
    return x[:10].clone(), y[:10].clone()


@pytest.mark.parametrize(("n_devices", "optimizer"), [
    (1, "adam"), (2, "sgd_momentum"), (3, "adam"), (4, "adam"), (4, "sgd_momentum"),
    (16, "adam"),
])
def test_reenactment_equals_one_device(batch: tuple[torch.Tensor, torch.Tensor],
                                       n_devices: int, optimizer: str) -> None:
    x, y = batch
    dp_model = mlp(32, 48, 2, 10, seed=1)
    ref_model = copy.deepcopy(dp_model)
    dp_opt = build_optimizer(optimizer, dp_model.parameters(), lr=0.01)
    ref_opt = build_optimizer(optimizer, ref_model.parameters(), lr=0.01)
    for _ in range(2):  # the second step starts from updated weights and optimizer state
        dp_opt.zero_grad(set_to_none=True)
        ref_opt.zero_grad(set_to_none=True)
        result = reenact_step(dp_model, x, y, n_devices, optimizer=dp_opt)
        ref = single_device_step(ref_model, x, y, optimizer=ref_opt)
        assert result.chunk_sizes == scatter_sizes(10, n_devices)
        assert result.gradients.keys() == ref.keys()
        for name in ref:
            torch.testing.assert_close(result.gradients[name], ref[name], rtol=0, atol=1e-6)
        for p, q in zip(dp_model.parameters(), ref_model.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-6)


def test_gradients_accumulate_like_dataparallel(batch: tuple[torch.Tensor, torch.Tensor]
                                                ) -> None:
    x, y = batch
    model = mlp(32, 16, 1, 10)
    ref = copy.deepcopy(model)
    reenact_step(model, x, y, 3)
    reenact_step(model, x, y, 3)  # no zero_grad: .grad doubles
    single_device_step(ref, x, y)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.grad is not None
        assert q.grad is not None
        torch.testing.assert_close(p.grad, 2 * q.grad, rtol=0, atol=1e-6)


def test_trace_has_every_phase_on_every_used_device(batch: tuple[torch.Tensor, torch.Tensor]
                                                    ) -> None:
    x, y = batch
    model = mlp(32, 16, 1, 10)
    result = reenact_step(model, x, y, 4, optimizer=build_optimizer("sgd", model.parameters()))
    trace = result.trace
    assert trace.source == "re-enacted"  # stand-in devices: never labelled measured
    assert [s.name for s in phase_steps(trace)] == ["scatter", "replicate", "forward", "gather",
                                                    "loss", "backward", "reduce", "optimizer"]
    for d in range(4):
        kinds = {e.kind for e in trace.filter(device=d)}
        assert {"scatter", "replicate", "forward", "gather", "backward", "reduce"} <= kinds
    assert {e.kind for e in trace.filter(kind="loss")} == {"loss"}
    assert {e.device for e in trace.filter(kind="loss")} == {0}
    assert {e.device for e in trace.filter(kind="optimizer")} == {0}
    scatter_bytes = [e.nbytes for e in trace.filter(kind="scatter")]
    assert scatter_bytes == [0, 3 * 32 * 4, 3 * 32 * 4, 1 * 32 * 4]  # chunk 0 is a view


def test_batch_smaller_than_n_uses_fewer_devices(batch: tuple[torch.Tensor, torch.Tensor]
                                                 ) -> None:
    x, y = batch
    result = reenact_step(mlp(32, 16, 1, 10), x[:2], y[:2], 4)
    assert result.chunk_sizes == [1, 1]
    assert {e.device for e in result.trace.events} == {0, 1}
    assert result.trace.meta["peak_bytes"][2:] == [0, 0]


def test_measured_memory_at_the_loss_matches_the_simulation(
        batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Bytes of the real tensors each virtual device holds == dpsim.sim.strategies.dp's model."""
    x, y = batch
    module = mlp(32, 48, 2, 10, seed=2)
    opt = build_optimizer("adam", module.parameters())
    reenact_step(module, x[:8], y[:8], 2, optimizer=opt)  # Adam's state exists from now on
    for n in (2, 4):
        opt.zero_grad(set_to_none=True)
        trace = reenact_step(module, x[:8], y[:8], n, optimizer=opt).trace
        workload = workload_from_module(mlp(32, 48, 2, 10), x[:8])
        loss_at = trace.filter(kind="loss")[0].end_s
        held = bytes_at(trace, loss_at, range(n))
        for d, expected in enumerate(bytes_at_loss(workload, DPConfig(n, 8))):
            measured = {k: v for k, v in held[d].items() if v}
            want = {k: v for k, v in expected.items() if v}
            assert measured.keys() == want.keys(), d
            for cat in want:
                extra = 4 if cat == "loss" else 0  # nll_loss's 0-dim total_weight
                assert measured[cat] == want[cat] + extra, (d, cat)


def test_replicate_module_shares_nothing_but_structure() -> None:
    module = mlp(4, 3, 1, 2)
    copies = [p.detach().clone().requires_grad_() for p in module.parameters()]
    replica = replicate_module(module, copies)
    assert replica is not module
    assert type(replica) is type(module)
    assert list(replica.parameters()) == []  # replicas hold plain tensors, like torch's
    x = torch.randn(3, 4)
    torch.testing.assert_close(replica(x), module(x))
    with torch.no_grad():
        copies[0].add_(1.0)
    assert not torch.allclose(replica(x), module(x))


def test_errors_are_raised_in_the_caller(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = batch

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(32, 10)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            if t.shape[0] < 3:
                raise RuntimeError("replica failed")
            return self.lin(t)

    with pytest.raises(RuntimeError, match="replica failed"):
        reenact_step(Broken(), x, y, 4)


def test_bad_input(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = batch
    with pytest.raises(ValueError, match="n_devices"):
        reenact_step(mlp(32, 8, 1, 10), x, y, 0)
    with pytest.raises(ValueError, match="batch_size"):
        reenact_step(mlp(32, 8, 1, 10), x[:0], y[:0], 2)
