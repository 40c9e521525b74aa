"""The simulator's one face (docs/architecture.md, "The simulator's face").

Outside `dpsim/sim/`, code imports the simulator only as `from dpsim.sim import ...`: the
other wings, the notebooks, solutions and exercises, the scripts, the benchmarks and the
site's configuration. Every function the face exports checks its arguments against its type
hints (`checks.checked`); inside, typed inputs are trusted, so the checks are few and a
simulation runs through them once, at the face. Tests may reach inside: they test it.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import dpsim.sim as sim
from dpsim.sim import checks
from tests.support.sources import ROOT, syntax

FACE = "dpsim.sim"
MAX_REQUIRE_CALLS = 150  # `require_*(` calls in dpsim/sim: checks at the face, not everywhere
OUTSIDE = [p for tree in ("dpsim", "scripts", "benchmarks", "website")
           for p in sorted((ROOT / tree).rglob("*.py"))
           if not p.is_relative_to(ROOT / "dpsim" / "sim")]
NOTEBOOKS = [p for folder in ("notebooks", "solutions", "exercises")
             for p in sorted((ROOT / folder).glob("*.ipynb"))]


def code_cells(notebook: Path) -> Iterator[tuple[int, ast.Module]]:
    """(cell index, syntax tree) of each code cell that parses once IPython lines are blanked."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        if lines and lines[0].startswith("%%writefile") and not lines[0].rstrip().endswith(".py"):
            continue  # a job script or other text the cell writes, not Python
        source = "\n".join("" if ln.lstrip().startswith(("%", "!")) or "= !" in ln else ln
                           for ln in lines)
        yield i, ast.parse(source)


def inner_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of a module inside the simulator."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(FACE + "."):
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names
                        if a.name.startswith(FACE + "."))


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_outside_the_simulator_imports_its_face_only(path: Path) -> None:
    found = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for line, module in inner_imports(syntax(path))]
    assert not found, f"import from dpsim.sim instead (the face): {found}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebooks_import_the_simulators_face_only(notebook: Path) -> None:
    found = [f"{notebook.relative_to(ROOT)} cell {i}:{line} imports {module}"
             for i, tree in code_cells(notebook) for line, module in inner_imports(tree)]
    assert not found, f"import from dpsim.sim instead (the face): {found}"


def test_the_inner_import_finder_finds_one() -> None:
    tree = ast.parse("from dpsim.sim.cost.memory import model_state_bytes\n"
                     "from dpsim.sim import plan\nimport dpsim.sim.planner\n")
    assert [m for _, m in inner_imports(tree)] == ["dpsim.sim.cost.memory", "dpsim.sim.planner"]


def test_every_name_of_the_face_exists_once() -> None:
    assert len(sim.__all__) == len(set(sim.__all__))
    missing = [n for n in sim.__all__ if not hasattr(sim, n)]
    assert not missing


def test_every_function_of_the_face_checks_its_arguments() -> None:
    unchecked = [n for n in sim.__all__ if inspect.isfunction(getattr(sim, n))
                 and not n.startswith("require_") and not hasattr(getattr(sim, n), "__wrapped__")]
    assert not unchecked, f"functions of the face not wrapped by checks.checked: {unchecked}"


def test_a_bad_argument_at_the_face_names_it() -> None:
    link = sim.NVLINK4
    with pytest.raises(ValueError, match=r"^nbytes=-1 "):
        sim.collective_time_s("all_reduce", -1, 8, link)
    with pytest.raises(ValueError, match=r"^collective='all_gossip' is not known"):
        sim.collective_time_s("all_gossip", 1024, 8, link)
    assert sim.collective_time_s("all_reduce", 1024, 8, link) > 0


def test_the_simulator_checks_in_few_places() -> None:
    text = "".join(p.read_text(encoding="utf-8")
                   for p in sorted((ROOT / "dpsim" / "sim").rglob("*.py")))
    calls = len(re.findall(r"\brequire_[a-z_]+\(", text))
    assert calls <= MAX_REQUIRE_CALLS, (
        f"{calls} require_*( calls in dpsim/sim (at most {MAX_REQUIRE_CALLS}): check at the "
        "face, with a bound in the type hint, and trust typed inputs inside")


def visits_to_checks(fn: Any) -> int:
    """How many times `fn()` enters sim/checks.py from code outside it."""
    checks_file = checks.__file__
    count = 0

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        nonlocal count
        if event == "call" and frame.f_code.co_filename == checks_file:
            caller = frame.f_back
            if caller is None or caller.f_code.co_filename != checks_file:
                count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def test_a_ddp_simulation_is_checked_once_at_the_face() -> None:
    workload, cluster = sim.get_workload("gpt2-124m"), sim.get_cluster("h100-node")
    config = sim.DDPConfig()
    sim.simulate(workload, cluster, config)  # hints resolved and caches filled first
    assert visits_to_checks(lambda: sim.simulate(workload, cluster, config)) == 1
