"""build_model: one entry point over the registry of the kit's models, and the same
parameters as before the models moved into dpsim.runtime.models.

The pins (parameter count, sum of |p| and sum over tensors k of (k + 1) * sum(p), in float64)
were computed on the code before the move, from the definitions then in the labs, the
exercise modules and runtime.models; equal pins mean the same construction order and the
same draws from torch's RNG.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from dpsim.course.exercises import (
    ch01_autocast_checkpoint,
    ch03_dp_forward,
    ch05_buckets,
    ch05_train,
    ch06_fsdp2,
    ch06_zero,
)
from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig
from dpsim.labs.ch05_ddp.ddp_train import build_model as ddp_build_model
from dpsim.runtime.fsdp_builders import fsdp_model
from dpsim.runtime.models import MODELS, build_model, describe_models, layer_stack, mlp
from dpsim.sim.workload import get_workload
from tests.support.bad_input import raises_naming

Pin = tuple[int, float, float]

# case: (registry name, seed, sizes, pin)
REGISTRY_PINS: dict[str, tuple[str, int, dict[str, Any], Pin]] = {
    "mlp": ("mlp", 0, {}, (142602, 4929.5015145287, 36.2001039815)),
    "mlp-ch03": ("mlp", 3, {"in_features": 32, "hidden": 64, "depth": 2, "n_classes": 10},
                 (6922, 485.3598718053, -25.372659149)),
    "mlp-fsdp": ("mlp", 0, {"in_features": 13, "hidden": 37, "depth": 2, "n_classes": 5},
                 (2114, 204.7593788454, 0.1367332866)),
    "stack-clipping": ("stack", 0, {"widths": [13, 37, 5], "activation": "gelu"},
                       (708, 89.1428369368, 0.2730219075)),
    "stack-myths": ("stack", 0, {"widths": [1024] * 9, "activation": "none"},
                    (8396800, 131238.1906311959, -117.9490943924)),
    "stack-amp": ("stack", 0, {"widths": [7, 6, 3], "activation": "gelu", "norm": True},
                  (81, 18.988874631, 20.1954775611)),
    "stack-meta": ("stack", 12345, {"widths": [3, 5, 4], "activation": "gelu", "norm": True,
                                    "after_last": True}, (62, 19.4993198253, 35.3589392025)),
    "stack-nobias": ("stack", 12345, {"widths": [5, 7, 3], "bias": False},
                     (56, 10.887716142, -1.6467511812)),
    "stack-tanh": ("stack", 0, {"widths": [4, 6, 5, 2], "activation": "tanh"},
                   (77, 17.3785412898, 6.3491479335)),
    "residual": ("residual", 0, {}, (6305, 618.8051282557, 788.3597467852)),
    "residual-seed2": ("residual", 2, {}, (6305, 622.9496587395, 670.2019473537)),
    "block_stack": ("block_stack", 0, {}, (132864, 6465.345904164, 2794.0262269825)),
    "block_stack-ch09": ("block_stack", 0, {"width": 128, "hidden": 512, "depth": 4},
                         (527872, 17991.910597713, 5503.8547530678)),
    "tiny_transformer": ("tiny_transformer", 0, {}, (13865, 1359.6232595151, 2526.9319663876)),
    "tiny_transformer-depth3": ("tiny_transformer", 0, {"depth": 3},
                                (20480, 1985.8718321774, 4762.8287232449)),
    "gpt2-tiny": ("gpt2", 0, {"n_layers": 2, "d_model": 64, "n_heads": 4, "seq_len": 32,
                              "vocab": 101}, (108608, 12603.9504612573, 6317.9430458343)),
    "rnn": ("rnn", 0, {}, (1410, 127.3491529584, 3.4431523259)),
    "rnn-ch04": ("rnn", 0, {"n_features": 8, "hidden": 16, "n_classes": 2},
                 (450, 56.8752553761, -4.4559699595)),
    "cnn": ("cnn", 1, {}, (48970, 1100.7178436214, 6.748798112)),
}

# the labs' and exercises' own entry points, each called after torch.manual_seed(12345)
# (the unseeded ones draw from that state): (call, pin)
CALL_SITE_PINS: dict[str, tuple[Callable[[], nn.Module], Pin]] = {
    "fsdp_model-mlp": (lambda: fsdp_model("mlp"), (2114, 204.7593788454, 0.1367332866)),
    "fsdp_model-residual": (lambda: fsdp_model("residual"),
                            (6305, 618.8051282557, 788.3597467852)),
    "ddp-mlp": (lambda: ddp_build_model(DDPRunConfig()), (7946, 522.7662586237, -2.4496845101)),
    "ddp-cnn": (lambda: ddp_build_model(DDPRunConfig(model="cnn"), 1),
                (48970, 1100.7178436214, 6.748798112)),
    "ch01-layer_stack": (lambda: layer_stack([5, 7, 9, 3]), (144, 27.0531432149, -0.0549229323)),
    "ch05_train": (lambda: ch05_train.make_model(4, 6, 0), (37, 8.7339333296, -5.2288841605)),
    "ch06_fsdp2": (lambda: ch06_fsdp2.make_model(4, 6, 0), (79, 17.526131643, 2.9405467706)),
    "ch06_zero": (lambda: ch06_zero.make_model([4, 6, 5, 2], 0),
                  (77, 17.3785412898, 6.3491479335)),
    "ch05_buckets": (lambda: ch05_buckets.make_model([4, 6, 2], 1),
                     (44, 9.1013319679, 2.8133423701)),
    "ch03_dp_forward": (lambda: ch03_dp_forward.build(
        {"model": "mlp", "seed": 0, "features": 5, "batch": 4})[0],
        (75, 15.6337114617, 2.2312217869)),
    "ch01_autocast-mlp": (lambda: ch01_autocast_checkpoint.build_mlp([4, 8, 3], 0),
                          (67, 14.5261479458, -2.419026155)),
    "ch01_autocast-blocks": (lambda: nn.ModuleList(
        ch01_autocast_checkpoint.build_blocks(6, 9, 3, 0)), (369, 67.9828149177, -6.267975426)),
}


def fingerprint(model: nn.Module) -> Pin:
    """(parameter count, sum |p|, sum over tensors k of (k + 1) * sum(p)), in float64."""
    ps = list(model.parameters())
    return (sum(p.numel() for p in ps),
            float(sum(p.detach().double().abs().sum() for p in ps)),
            float(sum((k + 1) * p.detach().double().sum() for k, p in enumerate(ps))))


def assert_pinned(model: nn.Module, pin: Pin) -> None:
    n, abs_sum, weighted = fingerprint(model)
    assert n == pin[0]
    assert abs_sum == pytest.approx(pin[1], rel=1e-11)
    assert weighted == pytest.approx(pin[2], rel=1e-9, abs=1e-8)


@pytest.mark.parametrize("case", REGISTRY_PINS)
def test_build_model_gives_the_parameters_pinned_before_the_move(case: str) -> None:
    name, seed, sizes, pin = REGISTRY_PINS[case]
    torch.manual_seed(999)  # build_model seeds: the state before does not matter
    assert_pinned(build_model(name, seed=seed, **sizes), pin)


@pytest.mark.parametrize("case", CALL_SITE_PINS)
def test_call_sites_give_the_parameters_pinned_before_the_move(case: str) -> None:
    call, pin = CALL_SITE_PINS[case]
    torch.manual_seed(12345)
    assert_pinned(call(), pin)


def test_every_registered_model_is_pinned_and_described() -> None:
    assert {name for name, *_ in REGISTRY_PINS.values()} == set(MODELS)
    text = describe_models()
    for name, spec in MODELS.items():
        assert f"{name} " in text
        assert spec.description in text
        assert spec.sizes(), name  # every model takes sizes
    assert "widths," in text  # a size without a default is listed bare


def test_mlp_keeps_its_seeded_signature_and_build_model_matches_it() -> None:
    a, b = mlp(32, 64, 2, 10, seed=3), build_model("mlp", seed=3, in_features=32, hidden=64,
                                                  depth=2, n_classes=10)
    assert isinstance(a, nn.Sequential)
    assert str(a) == str(b)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_meta_builds_shapes_only_and_leaves_the_rng_alone() -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    model = build_model("gpt2", device="meta")  # GPT-2 small: 124M parameters, no storage
    assert all(p.is_meta for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == \
        get_workload("gpt2-124m").n_params + 2 * 768  # ln_f: the preset's formula omits it
    assert torch.equal(torch.rand(3), expected)
    stack = build_model("stack", device="meta", widths=[1024] * 9, activation="none")
    assert [p.numel() * 4 for p in stack.parameters()][:2] == [4 * 1024 * 1024, 4 * 1024]


def test_device_moves_the_same_parameters() -> None:
    on_cpu = build_model("residual", seed=5, device="cpu")
    plain = build_model("residual", seed=5)
    assert fingerprint(on_cpu) == fingerprint(plain)
    assert all(p.device.type == "cpu" for p in on_cpu.parameters())


def test_bad_names_sizes_seeds_and_devices_are_named() -> None:
    with raises_naming("name"):
        build_model("resnet")
    with raises_naming("widht"):
        build_model("residual", widht=30)
    with raises_naming("widths"):
        build_model("stack")
    with raises_naming("width"):
        build_model("residual", width=0)
    with raises_naming("activation"):
        build_model("stack", widths=[3, 4], activation="swish")
    with raises_naming("widths[1]"):
        build_model("stack", widths=[3, 0, 2])
    with raises_naming("in_features"):
        build_model("cnn", in_features=50)
    with raises_naming("seed"):
        build_model("mlp", seed=-1)
    with raises_naming("device"):
        build_model("mlp", device="gpu0")
