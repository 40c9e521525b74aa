"""Generate exercises/NN.ipynb from solutions/NN.ipynb, or check that exercises/ is fresh.

Every block from a `### BEGIN SOLUTION` line to its `### END SOLUTION` line becomes
`raise NotImplementedError("Exercise N.M: write your code here")` at the block's
indentation (N.M is the id the graded cell passes to `check` with the enclosing
function); in markdown cells the block becomes "_Your answer here._". Outputs, execution
counts and metadata are cleared, so the same solutions always give the same bytes.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat import NotebookNode

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = 'raise NotImplementedError("Exercise {exercise_id}: write your code here")'
MARKDOWN_STUB = "_Your answer here._"
BUILD_COMMAND = "python -m dpsim exercises build"
CHECK_CALL = re.compile(r"""check\(\s*["'](\d+\.\d+)["']\s*,\s*([A-Za-z_]\w*)""")
DEF_LINE = re.compile(r"^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(")
DEFAULT_KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python",
                      "name": "python3"}


class SolutionFormatError(ValueError):
    """A solution notebook whose BEGIN/END SOLUTION markers cannot be turned into stubs."""


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _exercise_id(lines: list[str], begin: int, graded: dict[str, str], where: str) -> str:
    """Id of the exercise whose function encloses the block starting at line `begin`."""
    depth = len(_indent(lines[begin]))
    for line in reversed(lines[:begin]):
        match = DEF_LINE.match(line)
        if match and len(match.group(1)) < depth:
            name = match.group(2)
            if name in graded:
                return graded[name]
            raise SolutionFormatError(
                f"{where}: the solution block in `{name}` has no graded cell; add a cell "
                f'calling check("N.M", {name})')
    raise SolutionFormatError(
        f"{where}: the solution block at line {begin + 1} is not inside a function; put it "
        'in the function that a graded cell passes to check("N.M", function)')


def _replace_blocks(source: str, where: str, stub: str | None,
                    graded: dict[str, str]) -> tuple[str, int]:
    """Source with every solution block replaced, and the number of blocks."""
    lines = source.split("\n")
    out: list[str] = []
    begin: int | None = None
    blocks = 0
    for i, line in enumerate(lines):
        mark = line.strip()
        if mark == BEGIN:
            if begin is not None:
                raise SolutionFormatError(f"{where}: line {i + 1} opens '{BEGIN}' again; the "
                                          f"one at line {begin + 1} has no '{END}'")
            begin = i
        elif mark == END:
            if begin is None:
                raise SolutionFormatError(f"{where}: '{END}' at line {i + 1} has no '{BEGIN}'")
            if stub is None:
                out.append(MARKDOWN_STUB)
            else:
                exercise_id = _exercise_id(lines, begin, graded, where)
                out.append(_indent(lines[begin]) + stub.format(exercise_id=exercise_id))
            begin = None
            blocks += 1
        elif begin is None:
            out.append(line)
    if begin is not None:
        raise SolutionFormatError(f"{where}: '{BEGIN}' at line {begin + 1} has no '{END}'")
    return "\n".join(out), blocks


def make_exercise(solution: NotebookNode, name: str) -> NotebookNode:
    """The exercise notebook for `solution` (read from file `name`, used in errors)."""
    code = "\n".join(c.source for c in solution.cells if c.cell_type == "code")
    graded = {fn: ex_id for ex_id, fn in CHECK_CALL.findall(code)}
    cells = []
    blocks = 0
    for index, cell in enumerate(solution.cells):
        where = f"{name}, cell {index} ({cell.cell_type})"
        source, n = cell.source, 0
        if cell.cell_type in ("code", "markdown"):
            stub = STUB if cell.cell_type == "code" else None
            source, n = _replace_blocks(cell.source, where, stub, graded)
        blocks += n
        new = {"cell_type": cell.cell_type, "id": cell.get("id") or f"cell-{index}",
               "metadata": {}, "source": source}
        if cell.cell_type == "code":
            new.update(outputs=[], execution_count=None)
        cells.append(nbformat.from_dict(new))
    if blocks == 0:
        raise SolutionFormatError(f"{name}: no '{BEGIN}' ... '{END}' blocks; a solution "
                                  "notebook must mark its answers")
    kernelspec = dict(solution.metadata.get("kernelspec") or DEFAULT_KERNELSPEC)
    nb = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": kernelspec, "language_info": {"name": "python"}})
    nb.nbformat_minor = 5
    nbformat.validate(nb)
    return nb


def render(nb: NotebookNode) -> str:
    """The notebook as the stable JSON text that nbformat.write produces."""
    text = nbformat.writes(nb, version=4)
    return text if text.endswith("\n") else text + "\n"


def expected_exercises(root: Path) -> dict[Path, str]:
    """exercises/<name> -> its text, for every solutions/*.ipynb under `root`."""
    out: dict[Path, str] = {}
    for path in sorted((root / "solutions").glob("*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        name = str(path.relative_to(root))
        out[root / "exercises" / path.name] = render(make_exercise(solution, name))
    return out


def build(root: Path) -> list[str]:
    """Write every exercise notebook and remove orphans; return what changed."""
    wanted = expected_exercises(root)
    changed = []
    (root / "exercises").mkdir(exist_ok=True)
    for path, text in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(f"wrote {path.relative_to(root)}")
    for path in sorted((root / "exercises").glob("*.ipynb")):
        if path not in wanted:
            path.unlink()
            changed.append(f"removed {path.relative_to(root)} (no solutions/{path.name})")
    return changed


def problems(root: Path) -> list[str]:
    """Each exercise notebook that is missing, stale or orphaned (empty when fresh)."""
    wanted = expected_exercises(root)
    found = sorted((root / "exercises").glob("*.ipynb"))
    out = []
    for path, text in wanted.items():
        rel = path.relative_to(root)
        if not path.exists():
            out.append(f"{rel} is missing (solutions/{path.name} has no exercise notebook)")
        elif path.read_text(encoding="utf-8") != text:
            out.append(f"{rel} is stale (it differs from what solutions/{path.name} gives)")
    for path in found:
        if path not in wanted:
            out.append(f"{path.relative_to(root)} is orphaned (there is no solutions/{path.name})")
    return out


def main(action: str, root: str = ".") -> int:
    """`build` or `check` the exercise notebooks under `root`; return the exit code."""
    base = Path(root)
    try:
        if action == "build":
            changed = build(base)
            for line in changed:
                print(line)
            n = len(list((base / "exercises").glob("*.ipynb")))
            print(f"exercises: {n} notebook(s) up to date ({len(changed)} changed)")
            return 0
        if action == "check":
            found = problems(base)
            if found:
                for line in found:
                    print(f"exercises: {line}")
                print(f"Run `{BUILD_COMMAND}` to regenerate exercises/ from solutions/.")
                return 1
            n = len(list((base / "solutions").glob("*.ipynb")))
            print(f"exercises: OK, {n} exercise notebook(s) match solutions/")
            return 0
    except SolutionFormatError as exc:
        print(f"exercises: error: {exc}")
        return 1
    raise ValueError(f"action={action!r} is not known; allowed: 'build', 'check'")
