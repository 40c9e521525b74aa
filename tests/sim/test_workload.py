import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from dpsim.runtime.capture import workload_from_module
from dpsim.sim import PRESETS, Layer, Workload, get_workload, transformer
from dpsim.sim.limits import MAX_COUNT, MAX_DIM, MAX_LAYERS
from tests.support.bad_input import raises_naming


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
    with pytest.raises(ValueError, match="name='gpt5'"):
        get_workload("gpt5")
    w = get_workload("gpt2-124m")
    with pytest.raises(ValueError, match="batch_size=-1"):
        w.activation_bytes(-1)
    with pytest.raises(ValueError, match="dtype='fp8'"):
        w.activation_bytes(1, "fp8")


GOOD_LAYER: dict[str, Any] = {"name": "l", "kind": "Linear", "n_params": 10, "n_param_tensors": 2,
                              "activation_bytes": 40, "output_bytes": 40, "flops": 400.0}
LAYER = Layer(**GOOD_LAYER)
SMALL: dict[str, Any] = {"name": "t", "n_layers": 2, "d_model": 8, "n_heads": 2, "seq_len": 4,
                         "vocab": 10}


def _layer(**bad: object) -> Layer:
    return Layer(**{**GOOD_LAYER, **bad})


def _workload(**bad: Any) -> Workload:
    return Workload(**{"name": "w", "layers": (LAYER,), **bad})


def _transformer(**bad: object) -> Workload:
    return transformer(**{**SMALL, **bad})


BIG = _layer(n_params=MAX_COUNT // 2 + 1, activation_bytes=MAX_COUNT // 2 + 1)
BAD_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("name", lambda: _layer(name=None)),
    ("kind", lambda: _layer(kind=nn.Linear)),
    ("n_params", lambda: _layer(n_params=-1)),
    ("n_params", lambda: _layer(n_params=10.0)),
    ("n_params", lambda: _layer(n_params=MAX_COUNT + 1)),
    ("n_param_tensors", lambda: _layer(n_param_tensors=True)),
    ("activation_bytes", lambda: _layer(activation_bytes=-1)),
    ("output_bytes", lambda: _layer(output_bytes=math.nan)),
    ("flops", lambda: _layer(flops=math.inf)),
    ("flops", lambda: _layer(flops=-1.0)),
    ("flops", lambda: _layer(flops=1e31)),
    ("name", lambda: _workload(name=1)),
    ("layers", lambda: _workload(layers=LAYER)),
    ("layers[1]", lambda: _workload(layers=(LAYER, GOOD_LAYER))),
    ("dtype", lambda: _workload(dtype="fp8")),
    ("input_bytes", lambda: _workload(input_bytes=-8)),
    ("loss_bytes", lambda: _workload(loss_bytes=2**70)),
    ("meta", lambda: _workload(meta=None)),
    ("sum(layers[*].n_params)", lambda: _workload(layers=(BIG, BIG))),
    ("sum(layers[*].activation_bytes) + loss_bytes", lambda: _workload(
        layers=(_layer(activation_bytes=MAX_COUNT),), loss_bytes=1)),
    ("batch_size", lambda: get_workload("gpt2-124m").activation_bytes(True)),
    ("batch_size", lambda: get_workload("gpt2-124m").activation_bytes(MAX_COUNT + 1)),
    ("batch_size", lambda: get_workload("gpt2-124m").output_bytes(-1)),
    ("dtype", lambda: get_workload("gpt2-124m").output_bytes(1, "int8")),
    ("name", lambda: _transformer(name=None)),
    ("n_layers", lambda: _transformer(n_layers=0)),
    ("n_layers", lambda: _transformer(n_layers=MAX_LAYERS + 1)),
    ("n_layers", lambda: _transformer(n_layers=2.0)),
    ("d_model", lambda: _transformer(d_model=MAX_DIM + 1)),
    ("d_model", lambda: _transformer(d_model=False)),
    ("n_heads", lambda: _transformer(n_heads=0)),
    ("n_heads", lambda: _transformer(n_heads=16)),  # more heads than d_model=8
    ("seq_len", lambda: _transformer(seq_len=-4)),
    ("vocab", lambda: _transformer(vocab=math.inf)),
    ("d_ff", lambda: _transformer(d_ff=0)),
    ("d_ff", lambda: _transformer(d_ff=MAX_DIM * 2)),
    ("n_kv_heads", lambda: _transformer(n_kv_heads=3)),  # more than n_heads=2
    ("n_kv_heads", lambda: _transformer(n_kv_heads="1")),
    ("gated_mlp", lambda: _transformer(gated_mlp="False")),
    ("gated_mlp", lambda: _transformer(gated_mlp=1)),
    ("name", lambda: get_workload(None)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("field", "call"), BAD_CALLS,
                         ids=[f"{i}-{field}" for i, (field, _) in enumerate(BAD_CALLS)])
def test_bad_workload_inputs_name_their_field(field: str, call: Callable[[], object]) -> None:
    with raises_naming(field):
        call()


def test_gated_mlp_given_as_a_string_builds_nothing() -> None:
    with pytest.raises(ValueError, match=r"^gated_mlp='False' is not allowed; allowed: True, "):
        _transformer(gated_mlp="False")
    assert _transformer(gated_mlp=False).n_params != _transformer(gated_mlp=True).n_params


@pytest.mark.timeout(5)  # this call used to run for hours building 10**9 layers
@pytest.mark.parametrize("n_layers", [10**9, MAX_LAYERS + 1])
def test_too_many_layers_is_refused_at_once(n_layers: int) -> None:
    with pytest.raises(ValueError, match=rf"^n_layers={n_layers} is out of range; "
                                         rf"allowed >= 1 and <= {MAX_LAYERS}$"):
        _transformer(n_layers=n_layers)


@pytest.mark.timeout(10)  # about 0.1 s: a guard against a hang, not a speed goal
def test_the_largest_transformer_allowed_returns_within_the_bounds() -> None:
    w = transformer("largest", MAX_LAYERS, MAX_DIM, MAX_DIM, MAX_DIM, MAX_DIM, MAX_DIM,
                    gated_mlp=True)
    assert len(w.layers) == MAX_LAYERS + 2
    assert 0 < w.n_params <= MAX_COUNT
    assert 0 < w.activation_bytes(1) <= MAX_COUNT
    assert math.isfinite(w.train_flops_per_sample)


def test_defaults_of_d_ff_and_n_kv_heads_are_kept() -> None:
    assert _transformer(d_ff=None, n_kv_heads=None) == _transformer(d_ff=32, n_kv_heads=2)
