"""Every graded cell imports what it uses: a learner who runs the cells out of order, or
restarts the kernel and runs only the exercise, meets no NameError for `torch` or `check`.

A graded cell is one that holds an exercise's function (its solution between the
`### BEGIN SOLUTION` markers in solutions/, the stub in exercises/) or calls `check(...)`.
Its free names (read with `symtable`: used, in the cell or any function in it, and neither
assigned nor imported in the cell) may only be builtins and the exercises' own functions
(a check cell checks the function of the cell above it).
"""

from __future__ import annotations

import builtins
import json
import symtable
from pathlib import Path

import pytest

from dpsim.course.grading import all_exercises

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted(
    (ROOT / "exercises").glob("*.ipynb"))


def free_names(source: str) -> set[str]:
    """Names the cell uses without assigning or importing them (IPython magics skipped)."""
    code = "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith(("%", "!")))
    top = symtable.symtable(code, "<cell>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()
    stack = [top]
    while stack:
        table = stack.pop()
        used |= {s.get_name() for s in table.get_symbols()
                 if s.is_referenced() and (table is top or s.is_global())}
        stack += table.get_children()
    return used - defined - set(dir(builtins))


def graded_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and any(
                mark in source for mark in ("BEGIN SOLUTION", "NotImplementedError", "check(")):
            out.append((index, source))
    return out


def test_free_names_are_found() -> None:
    assert free_names("import os\ndef f(x):\n    return torch.cat(x) + os.sep\n") == {"torch"}
    assert free_names("from dpsim.grading import check\n\ncheck('1.1', f)") == {"f"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_graded_cell_imports_what_it_uses(path: Path) -> None:
    functions = {ex.function for ex in all_exercises()}
    cells = graded_cells(path)
    assert cells
    missing = {index: sorted(free_names(source) - functions) for index, source in cells}
    assert not {i: names for i, names in missing.items() if names}, path.name
