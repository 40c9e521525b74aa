"""Keep committed notebooks small: only cells checked by nbval carry outputs.

`refresh` executes notebooks (kernel "python3", in the notebook's folder) and writes them
back with outputs kept only in cells whose first line is `# NBVAL_CHECK_OUTPUT`, so nbval
has something to compare; `check` lists what a committed notebook should not carry.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat import NotebookNode

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
MAX_NBYTES = 200 * 1024  # committed notebook size limit
DEFAULT_REFRESH_DIRS = ("notebooks", "solutions")  # exercises/ is built, never executed
DEFAULT_CHECK_DIRS = ("notebooks", "solutions", "exercises")
PLOTLY_JS_SIGNS = ("plotly.js v", "window.PlotlyConfig", "require.undef(\"plotly\")",
                   "define('plotly'")
SOLUTION_SIGNS = ("BEGIN SOLUTION", "END SOLUTION")
KEPT_CELL_METADATA = ("tags",)


def is_checked(cell: NotebookNode) -> bool:
    """True for a code cell whose first line is `# NBVAL_CHECK_OUTPUT`."""
    first = cell.source.lstrip("\n").split("\n", 1)[0].strip() if cell.source else ""
    return cell.cell_type == "code" and first == CHECK_MARK


def strip_outputs(nb: NotebookNode) -> NotebookNode:
    """Clear outputs and execution counts of unchecked cells, and run metadata (in place).

    Checked cells keep their execution count: nbval only compares cells that were run.
    """
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in KEPT_CELL_METADATA}
        if cell.cell_type == "code" and not is_checked(cell):
            cell.execution_count = None
            cell.outputs = []
    nb.metadata.pop("widgets", None)
    if "language_info" in nb.metadata:
        nb.metadata["language_info"] = {"name": nb.metadata["language_info"].get("name",
                                                                                 "python")}
    return nb


def execute(path: Path, cell_timeout_s: float = 600.0) -> NotebookNode:
    """Run the notebook top to bottom in a fresh "python3" kernel; raise on a failed cell."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=int(cell_timeout_s), kernel_name="python3",
                            record_timing=False,
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    client.execute()
    return nb


def write(nb: NotebookNode, path: Path) -> None:
    """Write with nbformat's stable JSON formatting."""
    text = nbformat.writes(nb, version=4)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _expand(paths: list[str], default_dirs: tuple[str, ...]) -> list[Path]:
    items = [Path(p) for p in paths] or [Path(d) for d in default_dirs]
    out: list[Path] = []
    for item in items:
        if item.is_dir():
            out += sorted(p for p in item.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        elif item.suffix == ".ipynb":
            out.append(item)
    return out


def _outputs_text(cell: NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(str(output.get("text", "")))
        for value in output.get("data", {}).values():
            parts.append(value if isinstance(value, str) else str(value))
    return "".join(parts)


def problems(path: Path) -> list[str]:
    """What the committed notebook at `path` should not carry (empty when clean)."""
    out = []
    nbytes = path.stat().st_size
    if nbytes > MAX_NBYTES:
        out.append(f"{path}: {nbytes / 1024:.0f} KB, over the {MAX_NBYTES // 1024} KB limit")
    nb = nbformat.read(path, as_version=4)
    in_exercises = path.resolve().parent.name == "exercises"
    for index, cell in enumerate(nb.cells):
        where = f"{path}, cell {index}"
        if cell.cell_type == "code":
            checked = is_checked(cell)
            if cell.outputs and not checked:
                out.append(f"{where}: has outputs but is not a {CHECK_MARK} cell")
            if cell.execution_count is not None and not checked:
                out.append(f"{where}: has an execution count")
            if checked and not cell.outputs and not in_exercises:
                out.append(f"{where}: a {CHECK_MARK} cell without its stored output, so nbval "
                           "compares nothing; run `python -m dpsim notebooks refresh` on it")
            if checked and cell.outputs and cell.execution_count is None:
                out.append(f"{where}: a {CHECK_MARK} cell with outputs but no execution "
                           "count (nbval fails: 'Unrun reference cell has outputs')")
            text = _outputs_text(cell)
            if any(sign in text for sign in PLOTLY_JS_SIGNS):
                out.append(f"{where}: embeds plotly.js; call dpsim.course.session.setup() "
                           "first and display go.Figure objects")
        if in_exercises and any(sign in cell.source for sign in SOLUTION_SIGNS):
            out.append(f"{where}: an exercise notebook contains a solution marker")
    return out


def refresh(paths: list[str], cell_timeout_s: float = 600.0) -> int:
    """Execute each notebook and write it back keeping only checked outputs."""
    failed = 0
    for path in _expand(paths, DEFAULT_REFRESH_DIRS):
        if path.resolve().parent.name == "exercises":
            print(f"{path}: skipped (generated; run `python -m dpsim exercises build`)")
            continue
        try:
            nb = execute(path, cell_timeout_s)
        except Exception as exc:  # a failing cell: report and leave the file as it was
            failed += 1
            print(f"{path}: FAILED, not written\n{exc}")
            continue
        write(strip_outputs(nb), path)
        kept = sum(1 for c in nb.cells if is_checked(c))
        print(f"{path}: refreshed ({kept} checked cell(s) keep their output)")
    return 1 if failed else 0


def main(action: str, paths: list[str]) -> int:
    """`refresh` or `check` notebooks (default: notebooks/, solutions/[, exercises/])."""
    if action == "refresh":
        return refresh(paths)
    if action == "check":
        found = [p for path in _expand(paths, DEFAULT_CHECK_DIRS) for p in problems(path)]
        for line in found:
            print(line)
        if found:
            print("Run `python -m dpsim notebooks refresh PATHS` to store only checked outputs.")
            return 1
        n = len(_expand(paths, DEFAULT_CHECK_DIRS))
        print(f"notebooks: OK, {n} notebook(s) carry only checked outputs")
        return 0
    raise ValueError(f"action={action!r} is not known; allowed: 'refresh', 'check'")
