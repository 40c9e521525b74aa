"""Chapters 6 and 8 keep the torch calls of their practitioners' sections in their own code
cells: gradient accumulation under FSDP2 (6), claims measured in view, compression hooks and
torch.compile with DDP and FSDP2 (8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

IN_VIEW: dict[str, list[str]] = {
    "06_fsdp": ["set_requires_gradient_sync(", "set_reshard_after_backward(",
                "set_reshard_after_forward(", "isinstance(p, DTensor)", "CollectiveBytes("],
    "08_myths_lab": ["gradient_as_bucket_view=", "register_comm_hook(", "bucket.buffer()",
                     "allreduce_hook", "fp16_compress_hook", "bf16_compress_hook",
                     "powerSGD_hook.PowerSGDState(", "powerSGD_hook.powerSGD_hook",
                     "torch.compile(", "torch._dynamo.config.optimize_ddp", ".compile(backend=",
                     "fully_shard(", "run_all("],
}


@pytest.mark.parametrize("stem", sorted(IN_VIEW))
def test_the_practitioners_calls_are_in_view(stem: str) -> None:
    nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    missing = [call for call in IN_VIEW[stem] if call not in code]
    assert not missing, f"{stem}: not in any code cell: {missing}"
