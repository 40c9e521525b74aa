"""Gradescope's autograder zip (`python -m dpsim grade gradescope-autograder OUT.zip`).

The slow test stands in for Gradescope's harness: it unpacks the zip into Gradescope's
layout (`source/`, `submission/`, `results/`, `submission_metadata.json`) under a
temporary root (`AUTOGRADER_ROOT`), runs `setup.sh` as far as this machine's network allows
(no apt; pip from no index into a fresh environment that sees this one's packages) and
`run_autograder`, and checks the results.json it writes against Gradescope's
specification (`spec_problems`) and the fields `python -m dpsim grade` promises.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from dpsim.course.grading import gradescope_autograder as ag
from dpsim.course.grading.registry import chapter_exercises
from tests.support.offline_env import fresh_env

ROOT = Path(__file__).resolve().parents[3]


def test_scripts_name_the_assignment_and_the_format() -> None:
    """run_autograder grades with --format gradescope, the assignment and the metadata's
    student; setup.sh installs bubblewrap, CPU torch and the kit."""
    texts = ag.scripts("3", visibility="after_published", torch="2.13.0")
    run = texts["run_autograder"]
    assert "--format gradescope" in run
    assert "--exercises 3 --visibility after_published" in run
    assert "submission_metadata.json" in run
    setup = texts["setup.sh"]
    assert "bubblewrap" in setup
    assert f"--index-url {ag.TORCH_INDEX} \"torch==2.13.0\"" in setup
    assert '"$SOURCE/kit"' in setup
    with pytest.raises(ValueError, match="visibility"):
        ag.scripts("3", visibility="public")
    with pytest.raises(ValueError, match="99"):
        ag.scripts("99")


def test_command_needs_an_assignment(tmp_path: Path) -> None:
    """Without --exercises, or without one OUT.zip, no zip is written."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ag.main([str(tmp_path / "a.zip")]) == 2
        assert ag.main([str(tmp_path / "a.txt")], exercises="3") == 2
    assert "needs --exercises" in out.getvalue()
    assert not list(tmp_path.iterdir())


def test_spec_check_finds_what_gradescope_refuses() -> None:
    """The spec check passes a well-formed results.json and names each broken field."""
    test: dict[str, object] = {"name": "3.1 x", "number": "3.1", "score": 2, "max_score": 2,
                               "status": "passed", "output": "passed", "visibility": "visible"}
    good = {"score": 2, "execution_time": 1.5, "output": "", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": [test]}
    assert ag.spec_problems(good) == []
    bad = dict(good, visibility="public", tests=[dict(test, status="ok", score=3)])
    problems = ag.spec_problems(bad)
    assert any("visibility='public'" in p for p in problems)
    assert any("status='ok'" in p for p in problems)
    assert any("outside 0..max_score" in p for p in problems)
    assert ag.spec_problems([]) == ["results.json is not a JSON object"]


def _submission(path: Path) -> int:
    """A notebook of chapter 3's answers with 3.4 wrong; the points it should earn."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell("".join(c["source"])) for c in json.loads(
        (ROOT / "solutions" / "03_data_parallel.ipynb").read_text())["cells"]
        if c["cell_type"] == "code" and "BEGIN SOLUTION" in "".join(c["source"])]
    cells.append(new_code_cell(
        "def device0_extra_bytes(batch_size, out_features, n_params, n_param_tensors):\n"
        "    return 2 * 4 * n_params\n"))
    nbformat.write(new_notebook(cells=cells), path)
    return sum(ex.points for ex in chapter_exercises(3) if ex.exercise_id != "3.4")


@pytest.mark.slow
def test_zip_runs_in_gradescopes_layout(tmp_path: Path) -> None:
    """setup.sh and run_autograder in Gradescope's layout; results.json passes the spec.
    (Without bubblewrap the grader grades this one student unboxed, as it says.)"""
    started = time.monotonic()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert ag.main([str(tmp_path / "autograder.zip")], root=str(ROOT), exercises="3",
                       visibility="after_due_date") == 0, out.getvalue()
    root = tmp_path / "autograder"
    with zipfile.ZipFile(tmp_path / "autograder.zip") as zf:
        zf.extractall(root / "source")
    for name in ("setup.sh", "run_autograder"):
        (root / "source" / name).chmod(0o755)
    (root / "submission").mkdir()
    (root / "results").mkdir()
    expected = _submission(root / "submission" / "03_data_parallel.ipynb")
    (root / "submission_metadata.json").write_text(json.dumps(
        {"id": 123, "users": [{"email": "ada@example.edu", "name": "Ada", "id": 7}],
         "assignment": {"title": "Chapter 3"}}))
    python = fresh_env(tmp_path / "venv", inside=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "AUTOGRADER_ROOT": str(root), "DPSIM_SKIP_APT": "1", "DPSIM_PYTHON": str(python),
           "DPSIM_PIP_ARGS": "--no-index --no-build-isolation"}
    setup = subprocess.run(["bash", "setup.sh"], cwd=root / "source", env=env,
                           capture_output=True, text=True, timeout=600)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "setup.sh: dpsim, its key, torch" in setup.stdout
    set_up_s = time.monotonic() - started
    run = subprocess.run(["bash", str(root / "source" / "run_autograder")], cwd=root,
                         env={k: v for k, v in env.items() if not k.startswith("DPSIM_")},
                         capture_output=True, text=True, timeout=600)
    log = run.stdout + run.stderr
    got = json.loads((root / "results" / "results.json").read_text())
    assert ag.spec_problems(got) == [], log
    assert {"score", "execution_time", "output", "visibility", "stdout_visibility",
            "tests"} <= got.keys()
    assert [t["number"] for t in got["tests"]] == [e.exercise_id for e in chapter_exercises(3)]
    for test in got["tests"]:
        assert {"name", "number", "score", "max_score", "status", "output",
                "visibility"} <= test.keys()
        assert test["visibility"] == "after_due_date"
    assert got["score"] == expected, log
    assert "ada@example.edu" in log
    print(f"zip and setup.sh {set_up_s:.1f} s, run_autograder "
          f"{time.monotonic() - started - set_up_s:.1f} s", file=sys.stderr)
