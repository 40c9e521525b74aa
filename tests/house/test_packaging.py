"""pyproject.toml and environment.yml list the same dependencies; entry points exist."""

import ast
import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONDA_NAMES = {"torch": "pytorch"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[]", req, maxsplit=1)[0].strip().lower()


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_names = {_name(r) for r in project["dependencies"]}
    pip_names |= {_name(r) for r in project["optional-dependencies"]["dev"]}
    expected = {CONDA_NAMES.get(n, n) for n in pip_names}
    listed = set()
    text = (ROOT / "environment.yml").read_text()
    deps = text.split("dependencies:", 1)[1]
    for line in deps.splitlines():
        m = re.match(r"\s+- ([A-Za-z0-9_.-]+)", line)
        if m and m.group(1) not in ("python", "pip", "-e", "pip:"):
            listed.add(m.group(1).lower())
    assert listed == expected


def test_ci_runs_exactly_make_test() -> None:
    lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert "make test" in lines


@pytest.mark.slow
def test_doctor_runs_and_lists_every_chapter() -> None:
    out = subprocess.run([sys.executable, "-m", "dpsim", "doctor"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "CPU cores" in out
    assert "gloo" in out
    assert "GIL" in out
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert nb.name in out, f"{nb.name} missing from the doctor's plan"


def test_lab_binds_loopback_with_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token travels in the environment: a command line is visible to every user."""
    from dpsim.course.lab import TOKEN_ENV, lab_command

    monkeypatch.delenv(TOKEN_ENV, raising=False)

    argv, env = lab_command(port=9999, open_browser=False)
    token = env["JUPYTER_TOKEN"]
    assert "--ServerApp.ip=127.0.0.1" in argv
    assert "--ServerApp.port=9999" in argv
    assert len(token) >= 24
    assert not any(token in arg or "token" in arg.lower() for arg in argv)
    _, again = lab_command(port=9999, open_browser=False)
    assert again["JUPYTER_TOKEN"] != token  # a fresh token each start
    _, chosen = lab_command(token="x" * 32)
    assert chosen["JUPYTER_TOKEN"] == "x" * 32


def test_one_python_floor_everywhere() -> None:
    """requires-python, ruff's target, mypy's python_version and environment.yml agree."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    floor = config["project"]["requires-python"].removeprefix(">=")
    assert config["tool"]["ruff"]["target-version"] == "py" + floor.replace(".", "")
    assert config["tool"]["mypy"]["python_version"] == floor
    assert f"python>={floor}" in (ROOT / "environment.yml").read_text()
    assert f"Python {floor}+" in (ROOT / "README.md").read_text()
    assert sys.version_info >= tuple(int(p) for p in floor.split("."))


# Features of GNU make newer than 3.81 (macOS's make), as patterns, with the release that
# added each.
NEWER_MAKE = {r"\.ONESHELL": "3.82", r"\.RECIPEPREFIX": "3.82", r"\.SHELLFLAGS": "3.82",
              r"^\s*undefine\s": "3.82", r"(^|:)\s*private\s": "3.82",
              r"^\s*define\s+\S+\s*[:+?!]?=": "3.82", r"\s!=\s": "4.0", r"::=": "4.0",
              r"\$\(file\s": "4.0", r"\$\(guile\s": "4.0", r"^\s*-?load\s": "4.0",
              r"--output-sync": "4.0", r"\.SHELLSTATUS": "4.2", r"\.EXTRA_PREREQS": "4.3",
              r"&:": "4.3", r"\$\(let\s": "4.4", r"\$\(intcmp\s": "4.4",
              r"\.NOTINTERMEDIATE": "4.4"}


def test_makefile_works_with_gnu_make_3_81() -> None:
    text = (ROOT / "Makefile").read_text()
    used = {f: v for f, v in NEWER_MAKE.items() if re.search(f, text, re.M)}
    assert not used, f"the Makefile uses GNU make features newer than 3.81: {used}"
    recipes = [ln for ln in text.splitlines() if ln.startswith("\t")]
    bashisms = [ln for ln in recipes if re.search(r"\[\[|\bsource\b|\$'|<\(|&>", ln)]
    assert not bashisms, f"recipes run under /bin/sh: {bashisms}"


def _make_n(tmp_path: Path, env: dict[str, str], driver: bool) -> str:
    """`make -n` of the install step, on a PATH with (or without) an nvidia-smi."""
    make = shutil.which("make")
    assert make is not None
    bin_dir = tmp_path / ("driver" if driver else "nodriver")
    bin_dir.mkdir()
    for tool in ("sh", "uname", "sed"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    if driver:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    run_env = {"PATH": str(bin_dir), "HOME": str(tmp_path), **env}
    return subprocess.run([make, "-n", "-C", str(ROOT), ".venv/.dpsim-installed", "-B"],
                          env=run_env, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def _fresh(tmp_path: Path, name: str) -> Path:
    (tmp_path / name).mkdir()
    return tmp_path / name


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.skipif(sys.platform != "linux", reason="the automatic cpu choice is Linux's")
def test_make_chooses_the_torch_build(tmp_path: Path) -> None:
    cpu_index = "--index-url https://download.pytorch.org/whl/cpu"
    ci = _make_n(tmp_path, {"CI": "true"}, driver=False)  # CI: as before, standard index
    assert "-c constraints/ci.txt -e" in ci
    assert cpu_index not in ci
    laptop = _make_n(_fresh(tmp_path, "a"), {}, driver=False)
    assert f"{cpu_index} -c constraints/ci.txt torch" in laptop
    cuda = _make_n(_fresh(tmp_path, "b"), {}, driver=True)
    assert cpu_index not in cuda
    assert "constraints" not in cuda  # the package index's newest torch (the CUDA build)
    chosen = _make_n(_fresh(tmp_path, "c"), {"TORCH": "cpu", "CI": "true"}, driver=True)
    assert cpu_index in chosen  # the flag wins over both


def test_sources_parse_as_the_python_floor() -> None:
    """No syntax newer than requires-python (mypy's python_version checks stdlib names)."""
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    major, minor = (int(p) for p in floor.removeprefix(">=").split("."))
    dirs = ("dpsim", "tests", "benchmarks", "scripts")
    files = [p for d in dirs for p in (ROOT / d).rglob("*.py")]
    for path in files:
        ast.parse(path.read_text(), str(path), feature_version=(major, minor))
    with pytest.raises(SyntaxError):  # the check sees 3.12 syntax
        ast.parse("type Alias = int\n", feature_version=(3, 11))


def test_every_data_file_is_package_data() -> None:
    """Every file in dpsim/ that is not Python is in pyproject's package data, so an install
    that is not editable (a wheel, `pip install git+...`) has it too."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["dpsim"]
    package = ROOT / "dpsim"
    data = [p.relative_to(package).as_posix() for p in package.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert data, "dpsim holds data files (py.typed at least)"
    missing = [f for f in data if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert missing == [], f"not in pyproject's package-data: {missing}"
