"""The student's kit: `build(root, out)` writes it, an installable dpsim without the key.

Copied from the instructor's kit (this repository): `dpsim/` without
`dpsim/course/exercises/` (the answer key), `pyproject.toml` and `README.md`, the
walk-through `notebooks/` and the `exercises/` notebooks (never `solutions/`). Added: the
public cases as data (`dpsim/course/grading/public_cases/chNN.pkl`, `stored_cases`), the
copies of the key's harnesses they name (`dpsim/course/harness/`, `harness`) and
`KIT.txt` (what the kit is, what it lacks). Every chapter the registry lists is released.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from dpsim.course.grading.registry import all_exercises
from dpsim.course.grading.release.harness import harness_sources
from dpsim.course.grading.stored_cases import FOLDER, HARNESS_PACKAGE, KEY_PACKAGE, dump_exercises

KEY_FOLDER = Path("dpsim", *KEY_PACKAGE.split(".")[1:])
HARNESS_FOLDER = Path("dpsim", *HARNESS_PACKAGE.split(".")[1:])
DATA_FOLDER = Path("dpsim", "course", "grading", FOLDER.name)
NOTEBOOK_FOLDERS = ("notebooks", "exercises")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")
# every file under dpsim/ goes into the kit's wheel (the stored cases, the fidelity data)
PACKAGE_DATA = '[tool.setuptools.package-data]\ndpsim = ["**/*"]\n'
KIT_TEXT = """The student's kit of dpsim, built by `python -m dpsim course release`.

It holds the notebooks (notebooks/, exercises/) and dpsim without the answer key: no
reference answers, no dpsim/course/exercises/. check() judges your function on the public
cases stored in dpsim/course/grading/public_cases/ (inputs and expected answers as data,
never the code that computes them). Your grade is given by your instructor on cases of your
own that this kit does not hold.

Install: pip install . (in this folder), then open exercises/NN_topic.ipynb.
Chapters: {chapters}
"""


@dataclass
class Release:
    """What `build` wrote, and what the instructor should look at."""

    out: Path
    exercises: list[str] = field(default_factory=list)
    harness_modules: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def key_imports(notebook: Path) -> list[str]:
    """The code cells of `notebook` that import the answer key (they fail in the kit)."""
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    found = []
    for number, cell in enumerate(cells, 1):
        source = "".join(cell.get("source", []))
        if cell.get("cell_type") == "code" and re.search(re.escape(KEY_PACKAGE), source):
            found.append(f"{notebook.parent.name}/{notebook.name}, cell {number} imports "
                         f"{KEY_PACKAGE} (the answer key): it fails in the student's kit")
    return found


def installable_pyproject(root: Path) -> str:
    """`root`'s pyproject.toml with every file under dpsim/ as package data, so that an
    install that is not editable holds the data files too."""
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    pyproject, n = re.subn(r"\[tool\.setuptools\.package-data\]\n(?:[^\[\n].*\n)*",
                           PACKAGE_DATA, pyproject)
    if n != 1:
        raise ValueError("pyproject.toml: no [tool.setuptools.package-data] table to extend")
    return pyproject


def _write_package(root: Path, out: Path) -> None:
    """dpsim/ without the key, pyproject.toml (every package file as data), README.md."""
    shutil.copytree(root / "dpsim", out / "dpsim", ignore=SKIPPED)
    shutil.rmtree(out / KEY_FOLDER)
    for stale in (out / HARNESS_FOLDER, out / DATA_FOLDER):
        if stale.exists():
            shutil.rmtree(stale)
    (out / "pyproject.toml").write_text(installable_pyproject(root), encoding="utf-8")
    shutil.copy2(root / "README.md", out / "README.md")


def build(root: Path, out: Path) -> Release:
    """Write the student's kit into `out` (which must not exist, or be empty)."""
    root, out = root.resolve(), out.resolve()
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"out={str(out)!r} is not empty: the kit is written into a new folder")
    if root in (out, *out.parents):
        raise ValueError(f"out={str(out)!r} lies inside the repository {str(root)!r}")
    if not (root / KEY_FOLDER).is_dir():
        raise ValueError(f"root={str(root)!r} holds no {KEY_FOLDER}: not the instructor's kit")
    release = Release(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_package(root, out)
    refs: dict[str, set[str]] = {}
    chapters = sorted({ex.chapter for ex in all_exercises()})
    (out / DATA_FOLDER).mkdir()
    for chapter in chapters:
        exercises = [ex for ex in all_exercises() if ex.chapter == chapter]
        data, used = dump_exercises(exercises)
        (out / DATA_FOLDER / f"ch{chapter:02d}.pkl").write_bytes(data)
        release.exercises += [ex.exercise_id for ex in exercises]
        for tail, names in used.items():
            refs.setdefault(tail, set()).update(names)
    (out / HARNESS_FOLDER).mkdir(parents=True)
    (out / HARNESS_FOLDER / "__init__.py").write_text(
        '"""What the stored public cases run on a learner\'s function (generated)."""\n')
    for tail, source in sorted(harness_sources(refs).items()):
        (out / HARNESS_FOLDER / f"{tail}.py").write_text(source, encoding="utf-8")
        release.harness_modules.append(tail)
    for folder in NOTEBOOK_FOLDERS:
        shutil.copytree(root / folder, out / folder, ignore=SKIPPED)
        for notebook in sorted((out / folder).glob("*.ipynb")):
            release.warnings += key_imports(notebook)
    (out / "KIT.txt").write_text(KIT_TEXT.format(
        chapters=", ".join(map(str, chapters))), encoding="utf-8")
    return release


def main(out: str, root: str = ".") -> int:
    """`python -m dpsim course release OUT`: build the kit, say what it holds; 0 if built,
    2 if refused."""
    try:
        release = build(Path(root), Path(out))
    except ValueError as exc:
        print(f"course release: {exc}")
        return 2
    print(f"wrote the student's kit in {release.out}: {len(release.exercises)} exercises' "
          f"public cases, harness copies of {', '.join(release.harness_modules)}; no "
          f"{KEY_FOLDER}")
    for warning in release.warnings:
        print(f"course release: WARNING: {warning}")
    return 0
