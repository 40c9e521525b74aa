"""What a model costs: per-layer parameters, activation bytes and FLOPs.

`dpsim.runtime.capture.workload_from_module` builds the description from one forward
pass of a real module; presets describe large models by formula (no weights are
created). Activation bytes count what autograd keeps for backward, by a rule per layer
type (see SAVES), excluding parameters; FLOPs count forward multiply-adds as 2 FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from dpsim.sim.checks import Each, Instance, Int, Maybe, OneOf, Real, check_fields
from dpsim.sim.limits import MAX_COUNT, MAX_DIM, MAX_FLOPS, MAX_LAYERS, Count

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
Dtype = Annotated[str, OneOf(tuple(DTYPE_BYTES))]  # a key of DTYPE_BYTES
Dim = Annotated[int, Int(1, MAX_DIM)]  # a hidden size, a sequence length, a vocabulary

# Bounds: every count of a Layer or a Workload (parameters, tensors, bytes, samples) is at most
# MAX_COUNT, also summed over the layers; a layer does at most MAX_FLOPS forward FLOPs per
# sample. `transformer` takes at most MAX_LAYERS blocks and sizes up to MAX_DIM, so that it
# returns within a second and its model stays within those bounds.

# What each layer type keeps for its backward pass (PyTorch's autograd formulas).
SAVES: dict[str, str] = {
    "Linear": "input",  # grad_weight = grad_out^T @ input
    "Conv1d": "input",
    "Conv2d": "input",
    "Bilinear": "input",
    "ReLU": "output",  # grad = grad_out * (output > 0)
    "Tanh": "output",
    "Sigmoid": "output",
    "Softmax": "output",
    "GELU": "input",
    "SiLU": "input",
    "LayerNorm": "input",  # plus per-row mean and rstd (small)
    "BatchNorm1d": "input",
    "BatchNorm2d": "input",
    "Dropout": "mask",  # one byte per element
    "Embedding": "indices",  # the int64 indices
    "Flatten": "nothing",
    "Identity": "nothing",
    "MaxPool2d": "input",  # plus int64 indices of the maxima
    "AdaptiveAvgPool2d": "nothing",
}


@dataclass(frozen=True)
class Layer:
    """One layer, per sample of the batch."""

    name: str
    kind: str  # module class name, e.g. "Linear"
    n_params: Count
    n_param_tensors: Count
    activation_bytes: Count  # bytes kept for backward per sample, at the capture dtype
    output_bytes: Count  # bytes of the output per sample
    flops: Annotated[float, Real(0, MAX_FLOPS)]  # forward FLOPs per sample

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class Workload:
    """A model as the simulator sees it."""

    name: str
    layers: Annotated[tuple[Layer, ...], Each(Instance(Layer), 0, MAX_COUNT)]
    dtype: Dtype = "fp32"  # dtype in which activation and output bytes were counted
    input_bytes: Count = 0  # bytes of one input sample
    loss_bytes: Count = 0  # bytes the loss keeps for backward, per sample
    meta: Annotated[dict[str, Any], Instance(dict)] = field(default_factory=dict,
                                                            compare=False)

    def __post_init__(self) -> None:
        check_fields(self)
        # totals over the layers stay within the bounds of one layer's counts
        for total, value in (("sum(layers[*].n_params)", self.n_params),
                             ("sum(layers[*].n_param_tensors)", self.n_param_tensors),
                             ("sum(layers[*].activation_bytes) + loss_bytes",
                              self._act_per_sample())):
            if value > MAX_COUNT:
                raise ValueError(f"{total}={value} is out of range; allowed >= 0 and <= "
                                 f"{MAX_COUNT}")

    def _act_per_sample(self) -> int:
        return sum(layer.activation_bytes for layer in self.layers) + self.loss_bytes

    @property
    def n_params(self) -> int:
        """Number of parameters (elements)."""
        return sum(layer.n_params for layer in self.layers)

    @property
    def n_param_tensors(self) -> int:
        """Number of parameter tensors (optimizers keep one `step` per tensor)."""
        return sum(layer.n_param_tensors for layer in self.layers)

    @property
    def flops_per_sample(self) -> float:
        """Forward FLOPs per sample."""
        return sum(layer.flops for layer in self.layers)

    @property
    def train_flops_per_sample(self) -> float:
        """Forward + backward FLOPs per sample (backward ~ 2x forward)."""
        return 3.0 * self.flops_per_sample

    def activation_bytes(self, batch_size: Count, dtype: Dtype | None = None) -> int:
        """Bytes kept for backward by a batch, including the loss's, in `dtype`."""
        _check_batch(batch_size, dtype)
        return int(self._act_per_sample() * batch_size * _scale(self.dtype, dtype))

    def output_bytes(self, batch_size: Count, dtype: Dtype | None = None) -> int:
        """Bytes of the model's output for a batch (what DataParallel gathers)."""
        _check_batch(batch_size, dtype)
        last = self.layers[-1].output_bytes if self.layers else 0
        return int(last * batch_size * _scale(self.dtype, dtype))



def _check_batch(batch_size: int, dtype: str | None) -> None:
    """The arguments of `activation_bytes` and `output_bytes`, which the strategies call per
    step: a plain test first, the hints' checks only when it fails."""
    if (type(batch_size) is int and 0 <= batch_size <= MAX_COUNT
            and (dtype is None or (type(dtype) is str and dtype in DTYPE_BYTES))):
        return
    Int(0, MAX_COUNT)("batch_size", batch_size)
    Maybe(OneOf(tuple(DTYPE_BYTES)))("dtype", dtype)


def _scale(captured: str, wanted: str | None) -> float:
    if wanted is None:
        return 1.0
    return DTYPE_BYTES[wanted] / DTYPE_BYTES[captured]


# --- presets by formula ---------------------------------------------------------------


def transformer(
    name: str,
    n_layers: Annotated[int, Int(1, MAX_LAYERS)],
    d_model: Dim,
    n_heads: Dim,
    seq_len: Dim,
    vocab: Dim,
    d_ff: Dim | None = None,
    n_kv_heads: Dim | None = None,
    gated_mlp: bool = False,
) -> Workload:
    """A decoder-only transformer, per sample of `seq_len` tokens, activations in bf16.

    Activations per block follow Korthikanti et al. (2022) with flash attention:
    34 * seq_len * d_model bytes in 16-bit precision. Bounds: 1 <= n_layers <= MAX_LAYERS;
    d_model, seq_len, vocab and d_ff (default 4 * d_model) in 1..MAX_DIM; n_heads in
    1..d_model; n_kv_heads (default n_heads) in 1..n_heads.
    """
    if n_heads > d_model:
        raise ValueError(f"n_heads={n_heads!r} is more than d_model={d_model}; allowed: "
                         "1..d_model (a head has at least one dimension)")
    if n_kv_heads is not None and n_kv_heads > n_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads!r} is out of range; allowed >= 1 and <= "
                         f"{n_heads} (n_heads)")
    d_ff = d_ff or 4 * d_model
    kv = n_kv_heads or n_heads
    d_kv = d_model * kv // n_heads
    s, h = seq_len, d_model
    attn_params = h * h * 2 + 2 * h * d_kv + (0 if gated_mlp else 2 * h + 2 * d_kv)
    mlp_params = (3 if gated_mlp else 2) * h * d_ff + (0 if gated_mlp else d_ff + h)
    norm_params = 2 * h * (1 if gated_mlp else 2)
    block_params = attn_params + mlp_params + norm_params
    attn_flops = 2 * s * (attn_params) + 4 * s * s * h  # projections + QK^T and AV
    mlp_flops = 2 * s * mlp_params
    block_act = 34 * s * h
    pos = 0 if gated_mlp else s * h  # learned position embeddings (GPT-2 style)
    layers: list[Layer] = [
        Layer("embedding", "Embedding", vocab * h + pos, 1 if gated_mlp else 2, 8 * s, 2 * s * h,
              0.0)
    ]
    for i in range(n_layers):
        layers.append(Layer(f"block{i}", "TransformerBlock", block_params, 12 if not gated_mlp
                            else 9, block_act, 2 * s * h, float(attn_flops + mlp_flops)))
    layers.append(Layer("lm_head", "Linear", 0 if not gated_mlp else vocab * h,
                        0 if not gated_mlp else 1, 2 * s * h, 2 * s * vocab,
                        float(2 * s * h * vocab)))
    return Workload(name, tuple(layers), dtype="bf16", input_bytes=8 * s, loss_bytes=4 * s * vocab,
                    meta={"seq_len": seq_len, "d_model": d_model, "n_layers": n_layers,
                          "formula": "transformer"})


def resnet50() -> Workload:
    """ResNet-50 on 224x224 images, by stage (parameters exact; activations approximate)."""
    stages = [  # name, params, param tensors, saved fp32 elements per image, GMACs
        ("stem", 9_536, 3, 3_100_000, 0.118),
        ("layer1", 215_808, 30, 11_000_000, 0.680),
        ("layer2", 1_219_584, 39, 7_000_000, 1.030),
        ("layer3", 7_098_368, 57, 5_000_000, 1.470),
        ("layer4", 14_964_736, 30, 1_500_000, 0.810),
        ("fc", 2_049_000, 2, 2_048, 0.002),
    ]
    layers = tuple(Layer(n, "ResNetStage", p, t, 4 * e, 4 * e // 4, 2e9 * g)
                   for n, p, t, e, g in stages)
    return Workload("ResNet-50", layers, dtype="fp32", input_bytes=4 * 3 * 224 * 224,
                    loss_bytes=4 * 1000, meta={"formula": "resnet50 (approximate activations)"})


def _presets() -> dict[str, Any]:
    return {
        "gpt2-124m": lambda: transformer("GPT-2 124M", 12, 768, 12, 1024, 50257),
        "gpt-1.3b": lambda: transformer("GPT 1.3B", 24, 2048, 16, 2048, 50257),
        "llama-7b": lambda: transformer("7B transformer", 32, 4096, 32, 4096, 32000, 11008,
                                        gated_mlp=True),
        "llama-70b": lambda: transformer("70B transformer", 80, 8192, 64, 4096, 32000, 28672,
                                         n_kv_heads=8, gated_mlp=True),
        "resnet50": resnet50,
    }


PRESETS = tuple(_presets())


def get_workload(name: Annotated[str, OneOf(PRESETS)]) -> Workload:
    """A preset workload by name (see PRESETS)."""
    workload: Workload = _presets()[name]()
    return workload
