"""The fitted block of `dpsim/sim/collectives/link_constants.py`: the constants the collective fit
finds, written as the Python dpsim ships (`python -m dpsim validate --write-constants`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

BLOCK = re.compile(r"# fitted: begin\n.*?# fitted: end", re.S)
FILE = Path("dpsim/sim/collectives/link_constants.py")
# (name in link_constants, key in the fit's constants, digits kept: the fit's grid steps)
TABLES = (("LINK_FRACTION", "link_fractions", 2), ("LL_NETWORK_GBPS", "ll_network_GBps", 3),
          ("NVLS_FRACTIONS", "nvls_fractions", 2), ("HOP_LATENCY_US", "hop_latency_us", 2))
FILLS = (("FILL_US", "fill_us", 2), ("FILL_BYTES", "fill_bytes", 0))


def _table(name: str, values: dict[str, float], digits: int) -> str:
    if not values:
        return f"{name}: dict[str, Constant] = {{}}\n"
    rows = "".join(f'    "{k}": Constant({float(round(v, digits))!r}, FIT),\n'
                   for k, v in sorted(values.items()))
    return f"{name}: dict[str, Constant] = {{\n{rows}}}\n"


def block(fitted: dict[str, Any]) -> str:
    """The text between (and with) the `# fitted: begin` and `# fitted: end` lines."""
    text = "".join(_table(n, fitted[k], d) for n, k, d in TABLES)
    text += f"LAUNCH_US = Constant({float(round(fitted['launch_us'], 2))!r}, FIT)\n"
    text += "".join(_table(n, fitted[k], d) for n, k, d in FILLS)
    return f"# fitted: begin\n{text}# fitted: end"


def write(fitted: dict[str, Any], root: Path) -> Path:
    """Replace the fitted block of `root`'s link_constants.py with `fitted`; the path."""
    path = root / FILE
    text = path.read_text()
    if not BLOCK.search(text):
        raise ValueError(f"{path} has no '# fitted: begin' ... '# fitted: end' block")
    path.write_text(BLOCK.sub(lambda _: block(fitted), text, count=1))
    return path
