import pytest
import torch
from torch import nn

from dpsim.runtime.capture import workload_from_module
from dpsim.workload import PRESETS, get_workload


def test_from_module_counts_params_and_tensors(tiny_model: nn.Module) -> None:
    w = workload_from_module(tiny_model, torch.randn(4, 16))
    assert w.n_params == sum(p.numel() for p in tiny_model.parameters())
    assert w.n_param_tensors == len(list(tiny_model.parameters()))


def test_flops_of_linear_layers_are_two_per_multiply_add() -> None:
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    w = workload_from_module(model, torch.randn(5, 10))
    assert w.flops_per_sample == 2 * (10 * 20 + 20 * 3)


def test_activation_rule_counts_shared_tensors_once() -> None:
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    w = workload_from_module(model, torch.randn(5, 10))
    # input (10) + ReLU output (20, also the second Linear's input), fp32, + loss (3 + int64)
    assert w.activation_bytes(1) == 4 * (10 + 20) + (4 * 3 + 8)
    assert w.activation_bytes(7) == 7 * w.activation_bytes(1)
    assert w.activation_bytes(2, "bf16") == w.activation_bytes(2) // 2


def test_presets_have_their_nominal_size() -> None:
    sizes = {name: get_workload(name).n_params / 1e6 for name in PRESETS}
    assert sizes["gpt2-124m"] == pytest.approx(124.4, abs=0.5)
    assert sizes["gpt-1.3b"] == pytest.approx(1315, rel=0.02)
    assert sizes["llama-7b"] == pytest.approx(6738, rel=0.01)
    assert sizes["llama-70b"] == pytest.approx(68977, rel=0.02)
    assert sizes["resnet50"] == pytest.approx(25.557, abs=0.01)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="model='gpt5'"):
        get_workload("gpt5")
    w = get_workload("gpt2-124m")
    with pytest.raises(ValueError, match="batch_size=-1"):
        w.activation_bytes(-1)
    with pytest.raises(ValueError, match="dtype='fp8'"):
        w.activation_bytes(1, "fp8")
