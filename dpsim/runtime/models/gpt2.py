"""GPT-2 small in plain torch, the shape of the simulator's "gpt2-124m" preset.

Token and learned position embeddings, 12 pre-norm blocks (`nn.TransformerEncoderLayer`
with a causal mask, GELU, 4x MLP), a final LayerNorm and an LM head tied to the token
embedding. `scripts/record_gpu.py` times a bf16 training step of it on a GPU against the
simulator's prediction; no weights are downloaded (random initialisation).
"""

from __future__ import annotations

import torch
from torch import nn

from dpsim.sim import require_int


class GPT2(nn.Module):
    """A decoder-only transformer: (batch, seq) token ids -> (batch, seq, vocab) logits."""

    def __init__(self, n_layers: int = 12, d_model: int = 768, n_heads: int = 12,
                 seq_len: int = 1024, vocab: int = 50257) -> None:
        super().__init__()
        for name, value in (("n_layers", n_layers), ("d_model", d_model),
                            ("n_heads", n_heads), ("seq_len", seq_len), ("vocab", vocab)):
            require_int(name, value, 1, 1 << 20)
        self.seq_len = seq_len
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits for every position (the LM head shares the token embedding's weight)."""
        seq = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=ids.device)
        h = self.tok(ids) + self.pos(torch.arange(seq, device=ids.device))
        for block in self.blocks:
            h = block(h, src_mask=mask, is_causal=True)
        return self.ln_f(h) @ self.tok.weight.T


def gpt2_small() -> GPT2:
    """GPT-2 124M: 12 layers, d_model 768, 12 heads, 1024 positions, 50257 tokens."""
    return GPT2()
