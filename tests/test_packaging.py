"""pyproject.toml and environment.yml list the same dependencies; entry points exist."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
