"""Every file in dpsim/ reads in one sitting: at most ~350 lines, functions at most ~80.

A longer function says why in a `# long: <reason>` comment on the line above its `def`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dpsim"
MAX_FILE_LINES = 360  # ~350, with a little slack for a docstring
MAX_FUNCTION_LINES = 80
FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_file_is_short(path: Path) -> None:
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_FILE_LINES, f"{path.relative_to(PACKAGE)} has {n} lines; split it by concept"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_are_short_or_say_why(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        reason = start >= 2 and lines[start - 2].strip().startswith("# long:")
        assert length <= MAX_FUNCTION_LINES or reason, (
            f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} has {length} lines; split "
            "it, or say why it is one piece in a `# long: <reason>` comment above it")
