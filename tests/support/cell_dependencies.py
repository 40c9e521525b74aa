"""Which earlier cells of a notebook a cell needs: names used and bound, read with `ast`.

The browser test shows a notebook from the nbval run's executed copy and runs live only
what its widgets need (tests/support/executed_notebooks.py): the widget cells, the cells
that bind the names they use (imports, setup, definitions, the results of earlier runs),
transitively, and the notebook's first code cell (`session = setup(seed=0)` seeds and
picks the plotly renderer every figure and widget draws with). Everything else (the long
real runs nothing live uses) is shown as nbval ran it.

A cell's names are read statement by statement in order, so `from x import f; f()`
needs no earlier cell for `f`, `x = f(x)` does need the cell before that bound `x`, and a
loop's target or a comprehension's variable is no use of an earlier cell's name. Names
used in a function, lambda or class body count as used by the cell. An attribute or item
assignment (`a.x = 1`, `a[0] = 1`) counts as a use and a new binding of `a`, so a later
cell needs both. What no analysis of names can see (a method that mutates an object, a
file written by one cell and read by another) is not followed: the browser test fails
where that leaves a live cell without what it needs (a NameError on the page).
"""

from __future__ import annotations

import ast
import builtins
import symtable
from dataclasses import dataclass, field

# Names a notebook cell may use without binding them: Python's builtins and IPython's.
PREDEFINED = frozenset(dir(builtins)) | {"display", "get_ipython", "In", "Out", "exit", "quit"}
# Every live selection starts with the first code cell: `session = setup(seed=0)`.
SETUP_CELL = 0
# symtable's names for comprehension scopes (run at once, unlike a function or lambda body)
_COMPREHENSIONS = ("listcomp", "setcomp", "dictcomp", "genexpr")


@dataclass
class CellNames:
    """The names one cell needs from earlier cells (`uses`) and leaves bound (`binds`)."""

    uses: set[str] = field(default_factory=set)
    binds: set[str] = field(default_factory=set)


def python_source(source: str) -> str:
    """A cell's source as plain Python (IPython magics and shell escapes turned into calls)."""
    from IPython.core.inputtransformer2 import TransformerManager

    return str(TransformerManager().transform_cell(source))


def cell_names(source: str) -> CellNames:
    """What a cell uses from earlier cells and what it binds (raises SyntaxError as Python)."""
    names = CellNames()
    deferred: set[str] = set()  # used in function bodies: looked up when called
    _walk(ast.parse(python_source(source)).body, names, deferred)
    names.uses |= deferred - names.binds
    return names


def _walk(body: list[ast.stmt], names: CellNames, deferred: set[str]) -> None:
    """Read statements in order: what each uses before the cell bound it, then what it binds."""
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            _read(stmt.iter, names, deferred)
            _bind_target(stmt.target, names)
            _walk(stmt.body + stmt.orelse, names, deferred)
        elif isinstance(stmt, (ast.If, ast.While)):
            _read(stmt.test, names, deferred)
            _walk(stmt.body + stmt.orelse, names, deferred)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                _read(item.context_expr, names, deferred)
                if item.optional_vars is not None:
                    _bind_target(item.optional_vars, names)
            _walk(stmt.body, names, deferred)
        elif isinstance(stmt, ast.Try):
            _walk(stmt.body, names, deferred)
            for handler in stmt.handlers:
                if handler.type is not None:
                    _read(handler.type, names, deferred)
                if handler.name:
                    names.binds.add(handler.name)
                _walk(handler.body, names, deferred)
            _walk(stmt.orelse + stmt.finalbody, names, deferred)
        else:
            _read(stmt, names, deferred)
            for target in _targets(stmt):
                _bind_target(target, names)


def _targets(stmt: ast.stmt) -> list[ast.expr]:
    """The assignment targets of a simple statement (none for other statements)."""
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        return [stmt.target]
    return []


def _bind_target(target: ast.expr, names: CellNames) -> None:
    """Bind an assignment target's names; `a.x = ...` and `a[i] = ...` use and rebind `a`."""
    for node in ast.walk(target):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.binds.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                if base.id not in names.binds:
                    names.uses.add(base.id)
                names.binds.add(base.id)


def _read(node: ast.AST, names: CellNames, deferred: set[str]) -> None:
    """Add the names `node` reads (not yet bound by the cell) to uses; bind what it binds."""
    source = ast.unparse(node)
    table = symtable.symtable(source, "<cell>", "eval" if isinstance(node, ast.expr) else "exec")
    read_now: set[str] = set()
    bound_now: set[str] = set()
    for sym in table.get_symbols():
        if sym.is_referenced():
            read_now.add(sym.get_name())
        if sym.is_assigned() or sym.is_imported():
            bound_now.add(sym.get_name())
    for child in table.get_children():
        called_later = child.get_type() == "function" and child.get_name() not in _COMPREHENSIONS
        (deferred if called_later else read_now).update(_globals_read(child))
    names.uses |= read_now - names.binds
    names.binds |= bound_now


def _globals_read(table: symtable.SymbolTable) -> set[str]:
    """Module-level names a nested scope (function, lambda, class, comprehension) reads."""
    found = {s.get_name() for s in table.get_symbols() if s.is_referenced() and s.is_global()}
    for child in table.get_children():
        found |= _globals_read(child)
    return found


def live_cells(sources: list[str], targets: list[int]) -> list[int]:
    """Code cell numbers to run, in order, so that cells `targets` run as in the notebook.

    `sources` are the notebook's code cells. The result holds the targets, the first code
    cell, and for every name a selected cell uses, the latest earlier cell that binds it.
    """
    cells = [cell_names(s) for s in sources]
    wanted = {SETUP_CELL, *targets} if sources else set(targets)
    todo = sorted(wanted)
    while todo:
        k = todo.pop()
        for name in cells[k].uses:
            j = next((j for j in range(k - 1, -1, -1) if name in cells[j].binds), None)
            if j is not None and j not in wanted:
                wanted.add(j)
                todo.append(j)
    return sorted(wanted)


def unbound_names(sources: list[str], selected: list[int]) -> dict[int, set[str]]:
    """Per selected cell, the names it uses that no earlier selected cell binds (and that
    are not builtins): what a kernel running only `selected` would raise NameError on."""
    cells = [cell_names(s) for s in sources]
    missing: dict[int, set[str]] = {}
    for k in selected:
        bound = set().union(*(cells[j].binds for j in selected if j < k))
        left = cells[k].uses - bound - PREDEFINED
        if left:
            missing[k] = left
    return missing
