"""Every file in dpsim/ holds one concept, and its functions read in one sitting (~80 lines).

A file may be as long as its concept (docs/architecture.md, "Rules the code keeps"); what keeps
concepts apart is the absence of import circles and of imports of another module's private names
(tests/house/test_imports.py). A longer function says why in a `# long: <reason>` comment on the
line above its `def`. No catch-all modules: nothing is called utils, helpers, misc or common.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dpsim"
CATCH_ALL_NAMES = {"utils", "util", "helpers", "misc", "common"}
MAX_FUNCTION_LINES = 80
FILES = sorted(PACKAGE.rglob("*.py"))


def test_no_catch_all_modules() -> None:
    assert FILES
    bad = [str(p.relative_to(PACKAGE)) for p in FILES
           if p.stem in CATCH_ALL_NAMES or p.parent.name in CATCH_ALL_NAMES]
    assert not bad, f"{bad}: name a module after its concept, not 'utils'"


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
