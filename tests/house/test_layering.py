"""The wings of dpsim import each other in one direction only (docs/architecture.md).

sim <- runtime <- labs <- myths <- course, and sim <- viz <- widgets: the simulator never
imports torch or any other wing; `runtime` (infrastructure) never imports a chapter's `labs`,
and no chapter's lab imports another chapter's; `viz` draws numbers it is given and never
calls a cost model; nothing below `course` imports it.
Every import is read from the source (function-local imports included), so a lazy
`import torch` is caught too.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tests.support.sources import ROOT, module_name, syntax

PACKAGE = ROOT / "dpsim"
# wing -> the wings it may import (its own included)
ALLOWED = {
    "simulator": {"simulator"},
    "runtime": {"simulator", "runtime"},
    "labs": {"simulator", "runtime", "labs"},
    "reports": {"simulator", "reports"},
    "viz": {"simulator", "viz", "myths"},
    "widgets": {"simulator", "viz", "widgets", "runtime", "labs"},
    "myths": {"simulator", "runtime", "labs", "myths"},
    "course": {"simulator", "runtime", "labs", "viz", "widgets", "myths", "reports", "course"},
}
TORCH_FREE = {"simulator", "viz", "reports"}  # never import torch, not even lazily
# Third-party packages the simulator may use: the standard library and numpy only.
SIMULATOR_THIRD_PARTY = {"numpy"}
# Functions viz may call: arithmetic over results already simulated, no cost model inside.
VIZ_MAY_CALL = {"dpsim.sim.efficiencies"}  # t1 / (N tN) over a scaling curve


def wing(module: str) -> str:
    """The wing of a dotted dpsim module name."""
    parts = module.split(".")
    assert parts[0] == "dpsim", module
    if len(parts) == 1 or parts[1] in {"__main__", "grading", "course"}:
        return "course"  # the command line and the learner's `dpsim.grading` facade
    if parts[1] == "sim":
        return "simulator"
    assert parts[1] in ALLOWED, f"{module}: a module outside every wing; add it to a wing"
    return parts[1]


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names imported from it, line) for every import statement in the file."""
    out: list[tuple[str, list[str], int]] = []
    for node in ast.walk(syntax(path)):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports"
            out.append((node.module or "", [a.name for a in node.names], node.lineno))
    return out


FILES = sorted(PACKAGE.rglob("*.py"))


def test_every_file_belongs_to_a_wing() -> None:
    assert FILES
    for path in FILES:
        wing(module_name(path))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_imports_go_down_the_wings_only(path: Path) -> None:
    here = wing(module_name(path))
    for module, _names, line in imports(path):
        top = module.split(".")[0]
        where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        if top == "dpsim" and module != "dpsim":
            assert wing(module) in ALLOWED[here], f"{where} ({here} -> {wing(module)})"
        if here in TORCH_FREE:
            assert top != "torch", f"{where}: the {here} wing never imports torch"
        if here == "simulator":
            assert top in {"dpsim", "__future__", *SIMULATOR_THIRD_PARTY} or \
                top in _stdlib(), f"{where}: the simulator uses the standard library and numpy"


LAB_FILES = sorted((PACKAGE / "labs").glob("ch*/*.py"))


def chapter_lab(module: str) -> str | None:
    """The chapter lab package of a dotted name ("dpsim.labs.ch05_ddp"), or None."""
    parts = module.split(".")
    if parts[:2] == ["dpsim", "labs"] and len(parts) > 2 and parts[2].startswith("ch"):
        return ".".join(parts[:3])
    return None


def test_chapter_lab_recognises_a_lab() -> None:
    assert chapter_lab("dpsim.labs.ch05_ddp.ddp_train") == "dpsim.labs.ch05_ddp"
    assert chapter_lab("dpsim.labs") is None
    assert chapter_lab("dpsim.runtime.fsdp_run") is None
    assert LAB_FILES


@pytest.mark.parametrize("path", LAB_FILES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_a_lab_imports_no_other_chapters_lab(path: Path) -> None:
    """A chapter's lab stands alone: it imports its own chapter, `runtime` and `sim` only;
    what two chapters share lives in `runtime`."""
    mine = chapter_lab(module_name(path))
    for module, names, line in imports(path):
        targets = [module] + ([f"{module}.{n}" for n in names] if module == "dpsim.labs" else [])
        for target in targets:
            other = chapter_lab(target)
            assert other in (None, mine), (
                f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}, another "
                f"chapter's lab: move what both chapters use to dpsim/runtime/")


@pytest.mark.parametrize("path", sorted((PACKAGE / "viz").glob("*.py")),
                         ids=lambda p: p.name)
def test_viz_draws_and_never_calls_a_cost_model(path: Path) -> None:
    """Names viz takes from the simulator or the myths lab are types and constants."""
    for module, names, line in imports(path):
        if not module.startswith("dpsim.") or wing(module) not in {"simulator", "myths"}:
            continue
        source = importlib.import_module(module)
        for name in names:
            obj = getattr(source, name)
            assert f"{module}.{name}" in VIZ_MAY_CALL or not inspect.isroutine(obj), (
                f"{path.name}:{line} imports the function {module}.{name}: compute it in "
                "the caller (a widget or a notebook) and pass the numbers in")


def _stdlib() -> frozenset[str]:
    import sys

    return frozenset(sys.stdlib_module_names)
