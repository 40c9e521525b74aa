"""Every launch and torchrun cell of the course, on emulated machines with 1, 2, 4 and 8 GPUs.

No notebook has run on GPUs in CI, and a rank function that keeps CPU tensors crashes in
the NCCL group `launch`'s "auto" picks where there is a GPU per rank ("No backend type
associated with device type cpu"). For each notebook and solution, and each machine below:

* every `launch(...)` call a code cell makes is read (its world size evaluated as the
  notebook binds it, loop variables over literal tuples included) and its backend resolved
  by the runtime's own rule, `choose_backend`, with torch reporting that many GPUs and NCCL.
  Where that is gloo on every machine, the CPU run (nbval) is the run it gets there. Where
  it is NCCL, the rank function runs once on a CPU group that serves CUDA only, standing in
  for NCCL (`tests/support/emulated_gpus.py`): the cells it needs run first (the notebook's
  setup and definitions, found by `tests/support/cell_dependencies.py`; launches in them are
  left out). A rank function that keeps CPU tensors fails the test, naming the notebook,
  the cell and the machines; one that takes its GPU branch stops at the first real CUDA call
  and is reported as covered only by the GPU check (`scripts/gpu_check.sh`).
* every `torchrun` shell line runs its script (written by a `%%writefile` cell) as each of
  torchrun's ranks would, with torch reporting the machine's GPUs: the backend it starts is
  recorded, and for NCCL the group serves CUDA only, with the same verdicts.

It is slow (it starts processes) but small: only the launches that would be NCCL somewhere
run, each once.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from dpsim.runtime.launch import RankFailedError, choose_backend, launch
from tests.support.cell_dependencies import live_cells, python_source
from tests.support.emulated_gpus import (
    NEEDS_CUDA,
    WRONG_DEVICE,
    cuda_only_rank,
    fresh_prefix,
    torchrun_rank,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
    (ROOT / "solutions").glob("*.ipynb"))
MACHINES = {"1 GPU": 1, "2 GPUs": 2, "4 GPUs": 4, "8 GPUs": 8, "2 x T4": 2}
pytestmark = pytest.mark.slow


@dataclass
class LaunchCall:
    """One `launch(...)` in a code cell, with the names its loops bind for each run."""

    cell: int  # the cell's number among all the notebook's cells
    code_cell: int  # its number among the code cells
    call: ast.Call
    loops: list[dict[str, Any]] = field(default_factory=lambda: [{}])

    def keyword(self, name: str, default: str) -> str:
        for kw in self.call.keywords:
            if kw.arg == name:
                value = ast.literal_eval(kw.value)
                assert isinstance(value, str), f"cell {self.cell}: {name}= is not a literal"
                return value
        return default


def _cells(path: Path) -> tuple[list[int], list[str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    numbers = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    return numbers, ["".join(cells[i]["source"]) for i in numbers]


def _loops(tree: ast.AST, call: ast.Call) -> list[dict[str, Any]]:
    """Bindings of the comprehension or for-loop variables around `call` (literal tuples)."""
    bindings: list[dict[str, Any]] = [{}]
    for node in ast.walk(tree):
        loops: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, (ast.For, ast.ListComp, ast.DictComp, ast.SetComp,
                             ast.GeneratorExp)) and any(n is call for n in ast.walk(node)):
            if isinstance(node, ast.For):
                loops = [(node.target, node.iter)]
            else:
                loops = [(g.target, g.iter) for g in node.generators]
        for target, values in loops:
            if not isinstance(target, ast.Name):
                continue
            try:
                options = list(ast.literal_eval(values))
            except ValueError:
                continue
            bindings = [{**b, target.id: v} for b in bindings for v in options]
    return bindings


def launch_calls(path: Path) -> Iterator[LaunchCall]:
    numbers, sources = _cells(path)
    for k, source in enumerate(sources):
        tree = ast.parse(python_source(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                    node.func.id == "launch"):
                yield LaunchCall(numbers[k], k, node, _loops(tree, node))


def _has_launch(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
               and n.func.id == "launch" for n in ast.walk(node))


@functools.cache
def namespace_for(path: Path, code_cell: int, call: str) -> dict[str, Any]:
    """Run the cells the launch `call` of cell `code_cell` needs, leaving every launch out.

    The cells are those that bind the names `call` uses, as a cell right after `code_cell`
    would find them. A statement that uses what a left-out launch returned raises; it is
    left out too (what the rank function needs is defined, not returned by a launch).
    """
    _numbers, sources = _cells(path)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    needed = live_cells([*sources[:code_cell + 1], call], [code_cell + 1])
    for k in needed[:-1]:
        for stmt in ast.parse(python_source(sources[k])).body:
            if _has_launch(stmt) or "get_ipython" in ast.unparse(stmt):
                continue
            code = compile(ast.Module([stmt], []), f"{path.name} code cell {k}", "exec")
            try:
                exec(code, namespace)
            except (NameError, AttributeError, TypeError, IndexError, KeyError):
                continue
    return namespace


def _evaluate(node: ast.expr | None, namespace: dict[str, Any], bound: dict[str, Any],
              default: Any = None) -> Any:
    if node is None:
        return default
    return eval(compile(ast.Expression(node), "<launch>", "eval"), namespace, dict(bound))


def _world_size(call: ast.Call) -> ast.expr | None:
    if len(call.args) > 1:
        return call.args[1]
    return next((kw.value for kw in call.keywords if kw.arg == "world_size"), None)


def _constants(path: Path) -> dict[str, Any]:
    """Module-level NAME = <int> assignments of the notebook's code cells."""
    found: dict[str, Any] = {}
    for source in _cells(path)[1]:
        for stmt in ast.parse(python_source(source)).body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = stmt.value.value
    return found


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """`gpus(n)`: torch reports n CUDA GPUs and NCCL to the runtime's backend rule."""
    count = [0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count[0] > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count[0])
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)

    def set_count(n: int) -> None:
        count[0] = n

    return set_count


def _verdict(err: RankFailedError) -> str:
    """"needs CUDA" when the rank's own code (not torch for it) first asked for CUDA.

    Under NCCL torch itself moves some things to CUDA (the object collectives of
    `torch.distributed.checkpoint`, say): that is no sign the rank function took its GPU
    branch, and its CPU tensors would still meet the NCCL group, so that is a failure.
    """
    text = f"{err.summary}\n{err.traceback}"
    if not any(words in text for words in NEEDS_CUDA):
        return text
    files = re.findall(r'File "([^"]+)"', err.traceback or "")
    own = [i for i, f in enumerate(files) if "/torch/" not in f]
    if not any("/torch/distributed/" in f for f in files[own[-1] + 1 if own else 0:]):
        return "needs CUDA"
    return f"torch asked for CUDA on the rank function's behalf ({err.summary.splitlines()[0]})"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_launch_gets_a_backend_that_serves_its_tensors(path: Path, gpus: Any) -> None:
    constants = _constants(path)
    crashes, on_gpu_only = [], []
    for found in launch_calls(path):
        backend, device = found.keyword("backend", "auto"), found.keyword("device", "auto")
        for bound in found.loops:
            world_size = _evaluate(_world_size(found.call), constants, bound, 2)
            nccl_on = []
            for machine, n in MACHINES.items():
                gpus(n)
                if choose_backend(backend, world_size, device=device, check=False) == "nccl":
                    nccl_on.append(machine)
            gpus(0)
            if not nccl_on:
                continue  # gloo on every machine: the CPU run is the run it gets there
            namespace = namespace_for(path, found.code_cell, ast.unparse(found.call))
            fn = _evaluate(found.call.args[0], namespace, bound)
            kw = {k.arg: _evaluate(k.value, namespace, bound) for k in found.call.keywords
                  if k.arg in ("args", "kwargs")}
            where = (f"{path.parent.name}/{path.name} cell {found.cell} "
                     f"(world_size={world_size}) on {', '.join(nccl_on)}")
            try:
                launch(cuda_only_rank, world_size, backend="gloo", timeout_s=120,
                       args=(fn, tuple(kw.get("args", ())), dict(kw.get("kwargs") or {}),
                             fresh_prefix()))
            except RankFailedError as err:
                verdict = _verdict(err)
                if verdict == "needs CUDA":
                    on_gpu_only.append(where)
                else:
                    crashes.append(f"{where}: NCCL, and its rank function fails: "
                                   f"{verdict.splitlines()[0]}")
    assert not crashes, "\n".join(crashes)
    if on_gpu_only:
        print("takes its GPU branch (needs real CUDA tensors: the GPU check runs it):",
              *on_gpu_only, sep="\n  ")


TORCHRUN_LINE = re.compile(r"^\s*(?:\w+\s*=\s*)?!.*torchrun.*$", re.MULTILINE | re.IGNORECASE)


def torchrun_cells(path: Path) -> Iterator[tuple[int, str, int, list[str]]]:
    """(cell, script source, ranks, script arguments) of each torchrun shell line."""
    numbers, sources = _cells(path)
    written = {}
    for source in sources:
        head, _, body = source.partition("\n")
        if head.startswith("%%writefile"):
            written[Path(head.split()[-1]).name] = body
    for k, source in enumerate(sources):
        for line in TORCHRUN_LINE.findall(source):
            words = shlex.split(line.split("!", 1)[1].split("|")[0])
            script = next(w for w in words if w.endswith(".py"))
            name = Path(script.replace("{workdir}", "")).name
            assert name in written, f"{path.name} cell {numbers[k]}: {script} not written here"
            nproc = next(int(w.split("=")[1]) for w in words if w.startswith("--nproc"))
            argv = words[words.index(script) + 1:]
            yield numbers[k], written[name], nproc, argv


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if list(torchrun_cells(p))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_torchrun_cell_gets_a_backend_that_serves_its_tensors(path: Path,
                                                                     tmp_path: Path) -> None:
    crashes, on_gpu_only, backends = [], [], dict[str, str]()
    for cell, source, nproc, argv in torchrun_cells(path):
        script = tmp_path / f"cell{cell}.py"
        script.write_text(source)
        if re.search(r"init_process_group\(\s*\"gloo\"", source) and "cuda" not in source:
            backends[str(cell)] = "gloo on every machine"  # the CPU run is the run it gets there
            continue
        for n in sorted(set(MACHINES.values())):
            machines = ", ".join(m for m, k in MACHINES.items() if k == n)
            where = f"{path.parent.name}/{path.name} cell {cell} on {machines}"
            try:
                asked = launch(torchrun_rank, nproc, backend="gloo", timeout_s=120,
                               args=(str(script), argv, n, fresh_prefix()))
                backends[f"{cell}, {n} GPUs"] = asked[0]
            except RankFailedError as err:
                verdict = _verdict(err)
                if verdict == "needs CUDA":
                    on_gpu_only.append(where)
                else:
                    crashes.append(f"{where}: {verdict.splitlines()[0]}")
    assert not crashes, "\n".join(crashes)
    print("backends:", backends, "GPU branch only:", on_gpu_only)


def test_a_cpu_tensor_in_a_cuda_only_group_fails_as_under_nccl() -> None:
    """The stand-in raises NCCL's error for a CPU tensor, and runs a collective otherwise."""

    def cpu_all_reduce(rank: int, world_size: int) -> float:
        x = torch.ones(1)
        dist.all_reduce(x)
        return float(x)

    assert launch(cpu_all_reduce, 2, backend="gloo", timeout_s=60) == [2.0, 2.0]
    with pytest.raises(RankFailedError, match=WRONG_DEVICE):
        launch(cuda_only_rank, 2, backend="gloo", timeout_s=60,
               args=(cpu_all_reduce, (), {}, fresh_prefix()))
