"""The models the kit trains for real: built from seeds, no downloads.

One entry point, `build_model(name, seed=..., device=..., **sizes)`, over the registry
`MODELS` (`print(describe_models())` lists it). Each model lives in a module of its own:
`feedforward` (`layer_stack`, `mlp`), `residual` (`ResidualMLP`, `BlockStack`, their
pre-norm block), `tiny_transformer`, `gpt2`, `rnn` (`TinyRNN`) and `cnn` (`conv_stack`).
"""

from dpsim.runtime.models.cnn import conv_stack
from dpsim.runtime.models.feedforward import layer_stack, mlp
from dpsim.runtime.models.gpt2 import GPT2, gpt2_small
from dpsim.runtime.models.registry import MODELS, ModelSpec, build_model, describe_models
from dpsim.runtime.models.residual import BlockStack, ResidualMLP, prenorm_block
from dpsim.runtime.models.rnn import TinyRNN
from dpsim.runtime.models.tiny_transformer import TinyTransformer

__all__ = [
    "GPT2",
    "MODELS",
    "BlockStack",
    "ModelSpec",
    "ResidualMLP",
    "TinyRNN",
    "TinyTransformer",
    "build_model",
    "conv_stack",
    "describe_models",
    "gpt2_small",
    "layer_stack",
    "mlp",
    "prenorm_block",
]
