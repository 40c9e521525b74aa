"""Gradescope's autograder zip: `python -m dpsim grade gradescope-autograder OUT.zip`.

Gradescope unpacks the zip into `/autograder/source`, runs `setup.sh` there once (as root,
when it builds the image), then for each submission copies the student's files into
`/autograder/submission`, writes `/autograder/submission_metadata.json` and runs
`run_autograder`, which must leave `/autograder/results/results.json`. The zip holds:

- `setup.sh`: bubblewrap (the grader's OS box) and Python 3.11+ from apt, a virtual
  environment, CPU torch from PyTorch's wheel index and the instructor's kit (`kit/`: dpsim
  with the answer key, `dpsim/course/exercises/`). Where there is no network,
  `DPSIM_PIP_ARGS` (such as `--no-index --find-links DIR`) points pip at local wheels,
  `DPSIM_PYTHON` names a prepared Python to install into and `DPSIM_SKIP_APT=1` skips apt;
- `run_autograder`: `python -m dpsim grade --format gradescope` on the submission's
  notebooks, the assignment's exercises, the student from the metadata's first user;
- `grading_secret` when `DPSIM_GRADING_SECRET` is set while the zip is built (it seeds
  each student's hidden cases; the zip is the instructor's, never the students').

`AUTOGRADER_ROOT` (default `/autograder`) moves the layout, for a run outside Gradescope.
`spec_problems` checks a results.json against Gradescope's specification.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import stat
import tempfile
import zipfile
from pathlib import Path

from dpsim.course.grading import results
from dpsim.course.grading.grade.submission import assignment
from dpsim.course.grading.release.kit import installable_pyproject
from dpsim.course.grading.stored_cases import KEY_PACKAGE

TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
KIT = "kit"  # the instructor's kit inside the zip
SECRET_FILE = "grading_secret"
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "public_cases",
                                 "harness")

SETUP = r"""#!/usr/bin/env bash
# Gradescope runs this once in /autograder/source, as root, when it builds the image.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="$ROOT/source"
if [ -z "${{DPSIM_SKIP_APT:-}}" ] && command -v apt-get >/dev/null; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    bubblewrap util-linux python3.11 python3.11-venv
fi
read -r -a PIP_ARGS <<< "${{DPSIM_PIP_ARGS:-}}"
if [ -n "${{DPSIM_PYTHON:-}}" ]; then
  PY="$DPSIM_PYTHON"  # a prepared Python environment of its own
else
  BASE=""
  for candidate in python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null; then BASE="$(command -v "$candidate")"; break; fi
  done
  if [ -z "$BASE" ]; then echo "setup.sh: dpsim needs Python 3.11 or later" >&2; exit 1; fi
  "$BASE" -m venv "$SOURCE/venv"
  PY="$SOURCE/venv/bin/python"
fi
"$PY" -m pip install "${{PIP_ARGS[@]}}" --index-url {torch_index} "torch=={torch}"
"$PY" -m pip install "${{PIP_ARGS[@]}}" "$SOURCE/{kit}"
echo "$PY" > "$SOURCE/python"
"$PY" -c "import dpsim.course.exercises, torch; print('setup.sh: dpsim, its key, torch', \
  torch.__version__)"
"""

RUN = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission; it writes $ROOT/results/results.json.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="$ROOT/source"
PY="$(cat "$SOURCE/python")"
if [ -f "$SOURCE/{secret}" ]; then
  DPSIM_GRADING_SECRET="$(cat "$SOURCE/{secret}")"
  export DPSIM_GRADING_SECRET
fi
STUDENT="$("$PY" -I -c '
import json, sys
meta = json.load(open(sys.argv[1]))
user = (meta.get("users") or [{{}}])[0]
print(user.get("email") or user.get("id") or meta.get("id") or "student")
' "$ROOT/submission_metadata.json")"
mkdir -p "$ROOT/results"
mapfile -t NOTEBOOKS < <(find "$ROOT/submission" -type f -name '*.ipynb' \
  -not -path '*/.ipynb_checkpoints/*' | sort)
if [ "${{#NOTEBOOKS[@]}}" -eq 0 ]; then
  "$PY" -I -c '
import json, sys
json.dump({{"score": 0, "output": "No notebook (.ipynb) was submitted.", "tests": []}},
          open(sys.argv[1], "w"))
' "$ROOT/results/results.json"
  exit 0
fi
cd "$ROOT"
"$PY" -m dpsim grade "${{NOTEBOOKS[@]}}" --out "$ROOT/results" --format gradescope \
  --student "$STUDENT" {options}
"""


def _kit(root: Path, into: Path) -> None:
    """The instructor's kit: dpsim with the key, pyproject.toml, README.md."""
    if not (root / "dpsim" / Path(*KEY_PACKAGE.split(".")[1:])).is_dir():
        raise ValueError(f"root={str(root)!r} holds no answer key: build the autograder "
                         "from the instructor's kit (this repository)")
    shutil.copytree(root / "dpsim", into / "dpsim", ignore=SKIPPED)
    (into / "pyproject.toml").write_text(installable_pyproject(root), encoding="utf-8")
    shutil.copy2(root / "README.md", into / "README.md")


def scripts(exercises: str, visibility: str = "visible", cell_timeout_s: float = 60.0,
            memory_gib: float = 8.0, torch: str | None = None) -> dict[str, str]:
    """The text of setup.sh and run_autograder for the assignment `exercises`."""
    from dpsim.sim import require_choice

    assignment(exercises)  # ValueError naming what is wrong with the assignment
    require_choice("visibility", visibility, list(results.VISIBILITIES))
    if torch is None:
        import torch as installed

        torch = installed.__version__.split("+")[0]
    options = " ".join(shlex.quote(o) for o in (
        "--exercises", exercises, "--visibility", visibility,
        "--cell-timeout", f"{cell_timeout_s:g}", "--memory-gib", f"{memory_gib:g}"))
    return {"setup.sh": SETUP.format(torch_index=TORCH_INDEX, torch=torch, kit=KIT),
            "run_autograder": RUN.format(secret=SECRET_FILE, options=options)}


def write_zip(out: Path, root: Path, exercises: str, visibility: str = "visible",
              cell_timeout_s: float = 60.0, memory_gib: float = 8.0) -> list[str]:
    """Write the autograder zip to `out`; the names it holds."""
    texts = scripts(exercises, visibility, cell_timeout_s, memory_gib)
    secret = os.environ.get("DPSIM_GRADING_SECRET")
    with tempfile.TemporaryDirectory() as tmp:
        _kit(root.resolve(), Path(tmp) / KIT)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, text in texts.items():
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFREG | 0o755) << 16
                zf.writestr(info, text)
            if secret:
                info = zipfile.ZipInfo(SECRET_FILE)
                info.external_attr = (stat.S_IFREG | 0o600) << 16
                zf.writestr(info, secret)
            for path in sorted(Path(tmp, KIT).rglob("*")):
                if path.is_file():
                    zf.write(path, path.relative_to(tmp).as_posix())
            names = zf.namelist()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buffer.getvalue())
    return names


def spec_problems(data: object) -> list[str]:
    """What in a results.json breaks Gradescope's autograder specification (empty: none)."""
    if not isinstance(data, dict):
        return ["results.json is not a JSON object"]
    number = (int, float)
    problems = []
    tests = data.get("tests")
    if "score" not in data and not (isinstance(tests, list) and tests and all(
            isinstance(t, dict) and "score" in t for t in tests)):
        problems.append("no top-level score, and not every test has one")
    for key, kinds in (("score", number), ("execution_time", number), ("output", str),
                       ("visibility", str), ("stdout_visibility", str), ("tests", list)):
        if key in data and (not isinstance(data[key], kinds) or isinstance(data[key], bool)):
            problems.append(f"{key} is a {type(data[key]).__name__}")
    for key in ("visibility", "stdout_visibility"):
        if isinstance(data.get(key), str) and data[key] not in results.VISIBILITIES:
            problems.append(f"{key}={data[key]!r} is not one of {list(results.VISIBILITIES)}")
    for i, test in enumerate(tests if isinstance(tests, list) else []):
        if not isinstance(test, dict):
            problems.append(f"tests[{i}] is not an object")
            continue
        for key, kinds in (("score", number), ("max_score", number), ("name", str),
                           ("number", str), ("output", str), ("status", str),
                           ("visibility", str)):
            if key in test and not isinstance(test[key], kinds):
                problems.append(f"tests[{i}].{key} is a {type(test[key]).__name__}")
        if test.get("status", "passed") not in ("passed", "failed"):
            problems.append(f"tests[{i}].status={test['status']!r} is not passed or failed")
        if test.get("visibility", "visible") not in results.VISIBILITIES:
            problems.append(f"tests[{i}].visibility={test['visibility']!r} is not allowed")
        if isinstance(test.get("score"), number) and isinstance(test.get("max_score"), number) \
                and not 0 <= test["score"] <= test["max_score"]:
            problems.append(f"tests[{i}].score={test['score']} is outside 0..max_score")
    return problems


def main(paths: list[str], root: str = ".", exercises: str | None = None,
         visibility: str = "visible", cell_timeout_s: float = 60.0,
         memory_gib: float = 8.0) -> int:
    """`python -m dpsim grade gradescope-autograder OUT.zip --exercises ...`: 0 if written,
    2 if refused."""
    if len(paths) != 1 or not paths[0].endswith(".zip"):
        print("grade gradescope-autograder: give one OUT.zip")
        return 2
    if exercises is None:
        print("grade gradescope-autograder: needs --exercises (the assignment's exercises, "
              "such as 1 or 1.1,1.3)")
        return 2
    try:
        names = write_zip(Path(paths[0]), Path(root), exercises, visibility, cell_timeout_s,
                          memory_gib)
    except ValueError as exc:
        print(f"grade gradescope-autograder: {exc}")
        return 2
    secret = SECRET_FILE in names
    print(f"wrote {results.one_line(paths[0])}: setup.sh, run_autograder, the instructor's kit "
          f"({len(names)} files); assignment {exercises}; "
          + ("with DPSIM_GRADING_SECRET" if secret else
             "WARNING: no DPSIM_GRADING_SECRET set: a student's cases follow from the id"))
    return 0
