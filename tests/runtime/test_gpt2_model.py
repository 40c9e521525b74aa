"""GPT-2 small in torch has the simulator's gpt2-124m shape; it is causal."""

from __future__ import annotations

import pytest
import torch

from dpsim.runtime.models.gpt2 import GPT2, gpt2_small
from dpsim.sim.workload import get_workload


def test_parameters_are_the_presets_plus_the_final_layernorm() -> None:
    one = GPT2(n_layers=1, vocab=1)  # one of gpt2_small's 12 identical blocks, 1 token
    block = sum(p.numel() for p in one.blocks[0].parameters())
    n = sum(p.numel() for p in one.parameters()) + 11 * block + (50257 - 1) * 768
    assert n == get_workload("gpt2-124m").n_params + 2 * 768  # ln_f: the formula omits it
    assert gpt2_small.__defaults__ is None  # gpt2_small() is GPT2()'s defaults: 12, 50257
    assert GPT2.__init__.__defaults__ == (12, 768, 12, 1024, 50257)


def test_a_token_sees_only_its_past() -> None:
    torch.manual_seed(0)
    model = GPT2(n_layers=2, d_model=32, n_heads=4, seq_len=16, vocab=50).eval()
    ids = torch.randint(0, 50, (2, 16))
    changed = ids.clone()
    changed[:, 10] = (ids[:, 10] + 1) % 50
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert a.shape == (2, 16, 50)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])
    with pytest.raises(ValueError, match="n_heads=0"):
        GPT2(n_heads=0)
