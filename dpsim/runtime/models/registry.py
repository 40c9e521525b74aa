"""One entry point for "build a model": `build_model(name, seed=..., device=..., **sizes)`.

Every model the kit trains is registered here under a name, with its builder (a class or a
function in this package) and one line saying what it is; `print(describe_models())` lists
them with their sizes and defaults. `build_model` validates the name and the size names,
seeds torch's RNG, builds the model on the CPU and moves it to `device`, so equal seeds give
equal parameters on every device.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from dpsim.runtime.models.cnn import conv_stack
from dpsim.runtime.models.feedforward import layer_stack, mlp
from dpsim.runtime.models.gpt2 import GPT2
from dpsim.runtime.models.residual import BlockStack, ResidualMLP
from dpsim.runtime.models.rnn import TinyRNN
from dpsim.runtime.models.tiny_transformer import TinyTransformer
from dpsim.sim import require_choice, require_int

MAX_SEED = 2**63 - 1  # torch.manual_seed takes a 64-bit seed
REQUIRED = inspect.Parameter.empty  # the default of a size that has none


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its builder and one line for the learner."""

    build: Callable[..., nn.Module]  # sizes -> module; a `seed` parameter gets None
    description: str

    def sizes(self) -> dict[str, Any]:
        """The size names the builder takes, with their defaults (`seed` left out; REQUIRED
        for a size without one)."""
        params = inspect.signature(self.build).parameters
        return {n: p.default for n, p in params.items() if n != "seed"}

    def takes_seed(self) -> bool:
        """True if the builder seeds the RNG itself unless given seed=None."""
        return "seed" in inspect.signature(self.build).parameters


MODELS: Mapping[str, ModelSpec] = MappingProxyType({
    "mlp": ModelSpec(mlp, "Linear-ReLU stack: `depth` hidden layers of width `hidden` "
                          "(chapters 1, 3, 5, 10)"),
    "stack": ModelSpec(layer_stack, "Linear layers through `widths`, an activation (and "
                                    "LayerNorm) between them (chapters 8, 9, exercises)"),
    "residual": ModelSpec(ResidualMLP, "projection, pre-norm residual MLP blocks, LayerNorm, "
                                       "head; odd sizes (chapters 6, 8, 10: FSDP)"),
    "block_stack": ModelSpec(BlockStack, "pre-norm residual MLP blocks only, optionally under "
                                         "activation checkpointing (chapter 9)"),
    "tiny_transformer": ModelSpec(TinyTransformer, "pre-norm attention + MLP blocks on "
                                                   "[batch, 6, 13] inputs (chapters 6, 9)"),
    "gpt2": ModelSpec(GPT2, "GPT-2, by default small (124M: 12 layers, d_model 768); "
                            "random weights (GPU timing)"),
    "rnn": ModelSpec(TinyRNN, "an RNN cell stepped in a Python loop: many tiny operators "
                              "(chapter 4: the GIL)"),
    "cnn": ModelSpec(conv_stack, "3x3 convolutions on features read as 3 x s x s images "
                                 "(chapter 5: DDP)"),
})


def build_model(name: str, *, seed: int = 0, device: str | torch.device | None = None,
                **sizes: Any) -> nn.Module:
    """The registered model `name` with `sizes` (the rest default), initialised from `seed`.

    Parameters are drawn on the CPU after `torch.manual_seed(seed)`, then moved to `device`
    (None: stay on the CPU). device="meta" builds shapes only, with no storage: the RNG is
    neither seeded nor used, and torch's RNG state is left as it was.
    """
    require_choice("name", name, MODELS)
    spec = MODELS[name]
    allowed = spec.sizes()
    for field, value in sizes.items():
        if field not in allowed:
            raise ValueError(f"{field}={value!r} is not a size of model {name!r}; allowed: "
                             f"{', '.join(allowed) or 'none'}")
    for field, default in allowed.items():
        if default is REQUIRED and field not in sizes:
            raise ValueError(f"{field}=(missing) is required by model {name!r}, which has no "
                             f"default for it; give {field}=... (describe_models() lists "
                             "every size)")
    require_int("seed", seed, 0, MAX_SEED)
    target = _device(device)
    kwargs = {**sizes, "seed": None} if spec.takes_seed() else sizes
    if target is not None and target.type == "meta":
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            return spec.build(**kwargs)
    torch.manual_seed(seed)
    model = spec.build(**kwargs)
    return model if target is None else model.to(target)


def describe_models() -> str:
    """One line per registered model: name, what it is, and its sizes with their defaults."""
    lines = []
    for name, spec in MODELS.items():
        sizes = ", ".join(k if v is REQUIRED else f"{k}={v!r}" for k, v in spec.sizes().items())
        lines.append(f"{name:<17} {spec.description}\n{'':<17} sizes: {sizes}")
    return "\n".join(lines)


def _device(device: str | torch.device | None) -> torch.device | None:
    if device is None or isinstance(device, torch.device):
        return device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device={device!r} is not a torch device; allowed: None, 'cpu', "
                         "'cuda', 'cuda:N', 'meta' or a torch.device") from exc
