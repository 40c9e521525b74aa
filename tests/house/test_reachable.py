"""Every dpsim module is reached: imported, directly or through other dpsim modules, from a
notebook, solution or exercise cell, a script in scripts/, a benchmark, or the command line.

Imports are read from the source with `ast` (function-local ones included); a module reached
brings its parent packages; `from pkg import name` reaches `pkg.name` when that is a module; a
string constant that parses as Python with a dpsim import (code a reached module hands to a
subprocess, `python -c "from dpsim... import ..."`) counts as that import, and so does a
string that is exactly a dpsim module's name (Sphinx's extension list in website/conf.py).
A module nothing reaches is code no learner, script or command runs: delete it, or import it
from where it is used.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.support.sources import ROOT, module_name, syntax

PACKAGE = ROOT / "dpsim"
NOTEBOOK_DIRS = ("notebooks", "solutions", "exercises")
# Python files run as programs: scripts/, benchmarks/ (python -m benchmarks), and website/
# (Sphinx's conf.py, which names the site's extension dpsim.course.website.mathml).
SCRIPT_DIRS = ("scripts", "benchmarks", "website")
# Packages whose modules a module finds by listing them (pkgutil.iter_modules), not by
# name: reaching the finder reaches every module of the package.
DISCOVERED = {
    "dpsim.course.grading.registry": "dpsim.course.exercises",  # chapter_modules()
}


@cache
def modules() -> frozenset[str]:
    """Every dotted module name in dpsim/."""
    return frozenset(module_name(p) for p in PACKAGE.rglob("*.py"))


def cell_trees(notebook: Path) -> Iterator[ast.Module]:
    """The syntax tree of each code cell that parses (IPython's % and ! lines dropped)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        code = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))
        try:
            yield ast.parse(code)
        except SyntaxError:  # a cell that only parses with its neighbours: skipped
            continue


def code_in_string(text: str) -> ast.Module | None:
    """A string constant that is Python code with an import of dpsim, parsed; else None."""
    if "dpsim" not in text or "import" not in text:
        return None
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def imported(tree: ast.AST) -> Iterator[str]:
    """Dotted names a tree imports: modules, and module.name for every `from` import."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            inner = code_in_string(node.value)
            if inner is not None:
                yield from imported(inner)
            elif node.value in modules():  # a module named to import_module or Sphinx
                yield node.value


def reached_by(names: Iterator[str]) -> set[str]:
    """The dpsim modules these dotted names import, with their parent packages."""
    out: set[str] = set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "dpsim":
            continue
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in modules():
                out.add(".".join(parts[:i]))
    return out


def roots() -> dict[str, str]:
    """dpsim module -> the first root that imports it (a notebook, script or the CLI)."""
    found: dict[str, str] = {}
    for folder in NOTEBOOK_DIRS:
        for notebook in sorted((ROOT / folder).glob("*.ipynb")):
            for tree in cell_trees(notebook):
                for module in reached_by(imported(tree)):
                    found.setdefault(module, str(notebook.relative_to(ROOT)))
    for folder in SCRIPT_DIRS:
        for script in sorted((ROOT / folder).rglob("*.py")):
            for module in reached_by(imported(syntax(script))):
                found.setdefault(module, str(script.relative_to(ROOT)))
    for main in sorted(PACKAGE.rglob("__main__.py")):  # python -m dpsim, python -m dpsim.myths
        found.setdefault(module_name(main), "the command line")
    return found


def reachable() -> set[str]:
    """Every dpsim module reached from a root, following imports between dpsim modules."""
    seen: set[str] = set()
    todo = list(roots())
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module in DISCOVERED:
            todo += sorted(m for m in modules() if m.startswith(DISCOVERED[module] + "."))
        path = PACKAGE.parent / Path(*module.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        todo += reached_by(imported(syntax(source))) - seen
    return seen


def test_the_roots_are_found() -> None:
    found = roots()
    assert found["dpsim.course.session"].startswith("notebooks/")
    assert "dpsim.__main__" in found
    assert any(where.startswith("scripts/") for where in found.values())


def test_a_subprocess_code_string_counts_as_an_import() -> None:
    tree = ast.parse('CODE = "from dpsim.runtime.launch import free_port; free_port()"')
    assert "dpsim.runtime.launch" in reached_by(imported(tree))


def test_the_discovered_packages_are_listed_by_their_finders() -> None:
    for finder, package in DISCOVERED.items():
        source = (PACKAGE.parent / Path(*finder.split("."))).with_suffix(".py")
        text = source.read_text(encoding="utf-8")
        assert "pkgutil.iter_modules" in text, finder
        assert package in text, (finder, package)


def test_every_module_is_reached() -> None:
    unreached = sorted(modules() - reachable())
    assert not unreached, (
        f"{len(unreached)} dpsim module(s) that no notebook, solution, exercise, script, "
        f"benchmark or command imports, directly or through other modules: {unreached}")
