"""The GPU check's wheels (scripts/gpu_bundle.txt) cover every import it needs.

The GPU machine has its image's packages (scripts/gpu_image_packages.txt) and nothing can be
downloaded there. The check imports dpsim, scripts/, benchmarks/, the tests that `pytest -m
gpu` collects (all of tests/ but tests/browser), the repository's conftest.py and the
notebooks it runs; every third-party module any of them imports (lazy imports included) must
come from a distribution in one of the two lists, and nbval and ipykernel (used, not imported)
must be bundled. A new import that is in neither fails here: add its wheel (and the wheels of
its dependencies) to scripts/gpu_bundle.txt, then `make gpu-bundle` checks each wheel's
requirements.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.gpu_bundle import (
    BUNDLE_LIST,
    bundle_list,
    image_packages,
    normalize,
    problems,
    wheel_requirements,
)
from tests.support.cell_dependencies import python_source
from tests.support.sources import ROOT, syntax

CHECK_NOTEBOOKS = ("01_single_device", "03_data_parallel", "05_ddp", "06_fsdp", "08_myths_lab",
                   "09_precision_and_memory")
OWN = {"dpsim", "tests", "benchmarks", "scripts", "conftest"}
USED_NOT_IMPORTED = {"nbval", "ipykernel"}  # the pytest plugin and the notebooks' kernel


def python_files() -> list[Path]:
    # not the browser test, nor the site's Sphinx extension (the site is built on a CPU
    # machine, by `make site`; the GPU check never starts Sphinx)
    trees = ("dpsim", "scripts", "benchmarks", "tests")
    return [ROOT / "conftest.py", *sorted(
        p for t in trees for p in (ROOT / t).rglob("*.py")
        if "browser" not in p.relative_to(ROOT).parts
        and p != ROOT / "dpsim" / "course" / "website" / "mathml.py")]


def top_level_imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def notebook_imports(name: str) -> set[str]:
    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    names: set[str] = set()
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        # IPython's own reading: magics and shell escapes (`out = !cmd`) become calls
        names |= top_level_imports(ast.parse(python_source("".join(cell["source"]))))
    return names


def third_party_imports() -> dict[str, str]:
    """{top-level module: where one import of it is} over the check's code paths."""
    found: dict[str, str] = {}
    for path in python_files():
        for name in top_level_imports(syntax(path)):
            found.setdefault(name, str(path.relative_to(ROOT)))
    for nb in CHECK_NOTEBOOKS:
        for name in notebook_imports(nb):
            found.setdefault(name, f"notebooks/{nb}.ipynb")
    return {n: w for n, w in found.items()
            if n not in sys.stdlib_module_names and n not in OWN}


def distribution_of(module: str) -> str | None:
    """The normalized distribution that provides an importable top-level module."""
    dists = md.packages_distributions().get(module)
    return normalize(dists[0]) if dists else None


def test_the_lists_parse_and_keep_apart() -> None:
    pins, image = bundle_list(), image_packages()
    assert len(pins) >= 20
    assert {"torch", "numpy", "pytest", "packaging"} <= image
    assert "torch" not in pins, "the check uses the GPU machine's own torch"
    assert not set(pins) & image, f"{sorted(set(pins) & image)} are on the image already"
    assert set(pins) >= USED_NOT_IMPORTED


def test_every_import_of_the_check_is_bundled_or_on_the_image() -> None:
    covered = set(bundle_list()) | image_packages()
    imports = third_party_imports()
    assert {"torch", "plotly", "ipywidgets", "multiprocess"} <= set(imports)
    missing = {}
    for module, where in sorted(imports.items()):
        dist = distribution_of(module)
        if dist is None or dist not in covered:
            missing[module] = f"{where} (distribution {dist or 'not installed here'})"
    assert not missing, (f"imported by the GPU check but in neither {BUNDLE_LIST.name} nor "
                         f"the GPU image's list: {missing}")


def test_installed_dependencies_of_the_bundle_are_covered() -> None:
    """Each bundled distribution installed here at its pinned version: its requirements
    (for Python 3.12 on Linux) are bundled or on the image. (`make gpu-bundle` checks the
    downloaded wheels themselves, every one.)"""
    from packaging.requirements import Requirement

    from scripts.gpu_bundle import MARKERS

    pins, image = bundle_list(), image_packages()
    checked, missing = 0, []
    for name, version in pins.items():
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(MARKERS):
                continue
            if normalize(req.name) not in pins and normalize(req.name) not in image:
                missing.append(f"{name} requires {req.name}")
    assert checked >= len(pins) // 2, "few pinned versions are installed here: update the pins"
    assert not missing, missing


def fake_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
        name, version, "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
    return path


def test_bundle_check_finds_missing_extra_and_unmet_wheels(tmp_path: Path) -> None:
    pins = {"alpha": "1.0", "beta-pkg": "2.0"}
    image = {"numpy", "torch"}
    wheel = fake_wheel(tmp_path, "alpha", "1.0",
                       ["numpy>=1", "beta_pkg", "gamma; extra == 'docs'",
                        "winonly; sys_platform == 'win32'", "delta"])
    assert wheel_requirements(wheel) == ["numpy", "beta-pkg", "delta"]
    found = problems(tmp_path, pins, image)
    assert found == ["beta-pkg: no wheel (pinned 2.0)",
                     f"{wheel.name} requires delta: in neither gpu_bundle.txt nor "
                     "gpu_image_packages.txt"]
    fake_wheel(tmp_path, "beta_pkg", "2.1", [])
    assert "beta-pkg: wheels ['2.1'], pinned 2.0" in problems(tmp_path, pins, image)
    assert "torch: on the GPU image already; remove it from gpu_bundle.txt" in problems(
        tmp_path, {**pins, "torch": "2.11"}, image)


def test_bundle_list_refuses_a_line_without_a_pin(tmp_path: Path) -> None:
    bad = tmp_path / "list.txt"
    bad.write_text("plotly==7.1.0  # ok\nipywidgets>=8\n")
    with pytest.raises(ValueError, match="ipywidgets>=8"):
        bundle_list(bad)
