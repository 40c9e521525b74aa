"""No import circles and no imports of another module's private names, in dpsim/ and benchmarks/.

Every import statement is read from the source with `ast` (function-local and lazy imports
included: a lazy import hides a circle from Python, not from the reader). The module graph has
an edge a -> b for each import of b in a; `from a.b import c` is an edge to `a.b.c` when that is
a module and to `a.b` otherwise. The implicit import of a module's parent packages is left out,
so a package's `__init__` importing its own submodules is no circle by itself.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.sources import ROOT, module_name, syntax

TREES = ("dpsim", "benchmarks")


@dataclass(frozen=True)
class Import:
    """One imported module (and, for `from m import n`, the name n) at a file's line."""

    path: Path
    line: int
    module: str  # the module the edge goes to
    name: str | None  # the name taken from `module`, None for a module import


FILES = sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))
MODULES = {module_name(p): p for p in FILES}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a (possibly relative) `from ... import` names, seen from `module`."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package(module):
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def project_module(dotted: str) -> str | None:
    """The longest prefix of a dotted name that is a module of the project, or None."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in MODULES:
            return candidate
    return None


def imports(path: Path) -> Iterator[Import]:
    """Every import of a project module in the file, at any depth of the syntax tree."""
    here = module_name(path)
    for node in ast.walk(syntax(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield Import(path, node.lineno, alias.name, None)
        elif isinstance(node, ast.ImportFrom):
            source = absolute(here, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in MODULES:
                    yield Import(path, node.lineno, sub, None)
                elif source in MODULES:
                    yield Import(path, node.lineno, source, alias.name)


def graph() -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for path in FILES:
        for imp in imports(path):
            edges[module_name(path)].add(imp.module)
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle(edges: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest path start -> ... -> start inside one component (breadth first)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges[v] & within):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is on no cycle")


def circles() -> list[str]:
    """Each import circle (a component of more than one module, or a self-import) in words:
    one shortest cycle through it, and every module of the component when there are more."""
    edges = graph()
    found = []
    for component in strongly_connected(edges):
        if len(component) > 1 or component[0] in edges[component[0]]:
            cycle = shortest_cycle(edges, component[0], set(component))
            words = " -> ".join(cycle)
            if len(component) > len(cycle) - 1:
                words += f"  (the circle joins {len(component)} modules: {', '.join(component)})"
            found.append(words)
    return found


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dotted(node: ast.expr) -> str | None:
    """`a.b.c` for an attribute chain on a plain name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def private_imports(path: Path) -> Iterator[str]:
    """`file:line module.name` for each private name the file takes from another module."""
    where = path.relative_to(ROOT)
    bound: dict[str, str] = {}  # local name -> the project module it is bound to
    for imp in imports(path):
        if imp.name is not None and is_private(imp.name):
            yield f"{where}:{imp.line} imports {imp.module}.{imp.name}"
    for node in ast.walk(syntax(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                bound[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom):
            source = absolute(module_name(path), node)
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    for node in ast.walk(syntax(path)):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain = dotted(node.value)
        if chain is None or chain.split(".")[0] not in bound:
            continue
        head, *rest = chain.split(".")
        target = ".".join([bound[head], *rest])
        if target in MODULES and target != module_name(path):
            yield f"{where}:{node.lineno} uses {target}.{node.attr}"


def test_the_graph_sees_the_package() -> None:
    edges = graph()
    assert "dpsim.sim.trace" in edges["dpsim.sim.planner"] or any(
        m.startswith("dpsim.sim.") for m in edges["dpsim.sim.planner"])
    assert len(MODULES) > 100


def test_the_cycle_finder_finds_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}
    components = [c for c in strongly_connected(edges) if len(c) > 1 or c[0] in edges[c[0]]]
    assert components == [["a", "b", "c"], ["d"]]
    assert shortest_cycle(edges, "a", {"a", "b", "c"}) == ["a", "b", "c", "a"]
    assert shortest_cycle(edges, "d", {"d"}) == ["d", "d"]


def test_no_import_circles() -> None:
    found = circles()
    assert not found, (
        f"{len(found)} import circle(s) (lazy imports count):\n  "
        + "\n  ".join(found)
        + "\nBreak each one: move what both modules need into a leaf module they both import, "
        "or invert the dependency (pass a function or value in instead of importing it back).")


def test_no_module_imports_another_modules_private_names() -> None:
    found = [line for path in FILES for line in private_imports(path)]
    assert not found, (
        f"{len(found)} private name(s) taken from another module:\n  " + "\n  ".join(found)
        + "\nA name another module needs is public: rename it without the underscore (and "
        "update every user), or move it into the one module that uses it.")
