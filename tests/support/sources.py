"""The repository's Python sources as the house tests read them: dotted names and syntax trees."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path) -> str:
    """The dotted name of a source file under ROOT ("dpsim/sim/__init__.py" -> "dpsim.sim")."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def syntax(path: Path) -> ast.Module:
    """The parsed source of a file (each file is read once per test session)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
