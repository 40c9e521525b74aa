"""scripts/train_ddp.py is the script notebooks/05_ddp.ipynb writes: one source, two copies.

The notebook's `%%writefile train_ddp.py` cell is what the learner reads and runs under
torchrun; scripts/ keeps the same file for tests/runtime/test_torchrun.py and for use
outside the notebook. Edit one, copy it to the other.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAGIC = "%%writefile train_ddp.py\n"


def test_the_notebook_writes_scripts_train_ddp_py_verbatim() -> None:
    nb = json.loads((ROOT / "notebooks" / "05_ddp.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    written = [c for c in cells if c.startswith(MAGIC)]
    assert len(written) == 1, f"{len(written)} cells write train_ddp.py"
    script = (ROOT / "scripts" / "train_ddp.py").read_text(encoding="utf-8")
    assert written[0][len(MAGIC):].rstrip("\n") == script.rstrip("\n")
