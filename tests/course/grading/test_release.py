"""The two kits: the student's kit (`python -m dpsim course release OUT`) holds no answer
key, and its `check()` judges the stored public cases as the instructor's kit judges the
cases they were made from.

The fast tests compare, for every exercise, the stored cases with the registry's: the
right answer and every named mistake get the same verdict and message. The slow test builds
the kit, installs it into a fresh environment, finds no reference implementation there
(no `dpsim.course.exercises`; no function of the key outside the harness copies; no
solution block), imports every module, and runs chapter 3's public checks on its
solutions and on a wrong answer.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dpsim.course.grading import core, stored_cases
from dpsim.course.grading.plain import decode, encode, to_plain
from dpsim.course.grading.registry import all_exercises, chapter_modules
from dpsim.course.grading.release import build
from dpsim.course.grading.release.harness import module_copy
from dpsim.course.grading.reply import Reply
from tests.support.offline_env import fresh_env, pip_install

ROOT = Path(__file__).resolve().parents[3]
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)


def _reply(answers: list[Any]) -> Reply:
    """The sandbox's reply for these answers, as the judge reads it."""
    reply = Reply()
    for index, answer in enumerate(answers):
        reply.outcomes[index] = decode(encode({"i": index, "answer": to_plain(answer)}))
    return reply


def _verdicts(ex: Any, cases: list[Any]) -> list[tuple[int, int, str | None]]:
    """(passed, total, message) for the right answers and for each named mistake."""
    answers = [[c.expected for c in cases]]
    for words in dict.fromkeys(w for c in cases for w in c.mistakes):
        answers.append([c.mistakes.get(words, c.expected) if c.mistakes.get(words) is not None
                        else c.expected for c in cases])
    results = [core.judge(ex, cases, _reply(a), 1.0) for a in answers]
    return [(r.passed, r.total, r.message) for r in results]


def test_stored_cases_judge_as_the_registrys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every exercise's public cases, stored and loaded back (their harnesses resolved in
    the key here), give the same verdicts and messages as the registry's cases."""
    monkeypatch.setattr(stored_cases, "HARNESS_PACKAGE", stored_cases.KEY_PACKAGE)
    exercises = all_exercises()
    for ex in exercises:
        data, refs = stored_cases.dump_exercises([ex])
        [(fields, cases)] = pickle.loads(data)
        assert fields["exercise_id"] == ex.exercise_id
        fresh = ex.cases()
        assert [c.label for c in cases] == [c.label for c in fresh]
        assert _verdicts(ex, cases) == _verdicts(ex, fresh), ex.exercise_id
        for tail, names in refs.items():
            module = importlib.import_module(f"{stored_cases.KEY_PACKAGE}.{tail}")
            assert all(hasattr(module, n) for n in names)


def test_instructors_kit_checks_with_its_key() -> None:
    """This repository holds the key: `check` is the registry's (grades as before)."""
    import dpsim.grading

    assert not stored_cases.stored()
    assert dpsim.grading.check is core.check


def test_harness_copy_leaves_the_answers_out() -> None:
    """Chapter 1's checkpointing harness is copied without the reference (`torch_blocks`),
    the slips and the case makers."""
    source, imports = module_copy("ch01_autocast_checkpoint", {"run_blocks_measured"})
    names = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
    assert {"run_blocks_measured", "build_blocks"} <= names
    assert not names & {"torch_blocks", "_detached_blocks", "_checkpoint_cases", "torch_step"}
    assert "@exercise" not in source
    assert imports == {}
    _, imports = module_copy("ch02_p2p_answers", {"ring_explain"})
    assert set(imports) <= {"ch02_ranks"}


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _key_functions() -> dict[str, str]:
    """`module.name` -> normalized source of every function the key's modules define."""
    found = {}
    for name in chapter_modules():
        module = importlib.import_module(name)
        for attr, fn in vars(module).items():
            if inspect.isfunction(fn) and fn.__module__ == name:
                found[f"{name}.{attr}"] = _norm(inspect.getsource(fn))
    return found


def _solution_blocks() -> list[str]:
    blocks = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            blocks += [_norm(b) for b in SOLUTION.findall("".join(cell["source"])) if _norm(b)]
    return blocks


IMPORT_ALL = """
import importlib, pkgutil, sys, dpsim
failed = []
for info in pkgutil.walk_packages(dpsim.__path__, "dpsim."):
    if info.name.endswith(".__main__"):  # a command: importing it runs it
        continue
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed) or "all imported")
print("FILE", dpsim.__file__)
"""
WRONG_3_4 = """
from dpsim.grading import check
def device0_extra_bytes(batch_size, out_features, n_params, n_param_tensors):
    return 2 * 4 * n_params + 4 * batch_size * out_features  # the loss's saved tensors left out
try:
    check("3.4", device0_extra_bytes)
except AssertionError as exc:
    print("FAILED", exc)
"""


def _chapter_script(notebook: Path) -> str:
    """The solution cells and graded cells of a solutions notebook, as one script."""
    cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"]
             if c["cell_type"] == "code"]
    return "\n\n".join(c for c in cells if "BEGIN SOLUTION" in c or 'check("' in c)


@pytest.mark.slow
def test_students_kit_holds_no_key_and_checks(tmp_path: Path) -> None:
    """The student's kit, installed into a fresh environment: no reference implementation
    in its files, every module imports, chapter 3's public checks pass its solutions and
    name a wrong answer's mistake, and `grade` says it needs the instructor's kit."""
    listed = {ex.exercise_id for ex in all_exercises()}
    started = time.monotonic()
    release = build(ROOT, tmp_path / "kit")
    built_s = time.monotonic() - started
    assert listed <= set(release.exercises)  # every chapter the registry lists
    python = fresh_env(tmp_path / "venv")
    done = pip_install(python, "--no-deps", str(tmp_path / "kit"))
    assert done.returncode == 0, done.stderr
    installed_s = time.monotonic() - started - built_s
    run = subprocess.run([str(python), "-I", "-c", IMPORT_ALL], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    assert "all imported" in run.stdout, run.stdout + run.stderr
    package = Path(run.stdout.split("FILE ")[1].strip()).parent
    assert str(package).startswith(str(tmp_path)), package
    assert not (package / "course" / "exercises").exists()
    files = {p: _norm(p.read_text(encoding="utf-8")) for p in package.rglob("*.py")}
    copies = {p.stem: {n.name for n in ast.parse(p.read_text()).body
                       if isinstance(n, ast.FunctionDef | ast.ClassDef)}
              for p in (package / "course" / "harness").glob("ch*.py")}
    for dotted, source in _key_functions().items():
        module, name = dotted.rsplit(".", 1)
        if name in copies.get(module.rsplit(".", 1)[1], set()):
            continue  # a harness the stored cases run (or what it uses)
        holders = [str(p) for p, text in files.items() if source in text]
        assert not holders, f"{dotted} of the key is in the student's kit: {holders}"
    for block in _solution_blocks():
        assert not [p for p, text in files.items() if block in text], block[:200]
    for notebook in (tmp_path / "kit" / "exercises").glob("*.ipynb"):
        assert "BEGIN SOLUTION" not in notebook.read_text()
    script = tmp_path / "chapter3.py"
    script.write_text(_chapter_script(ROOT / "solutions" / "03_data_parallel.ipynb")
                      + "\n" + WRONG_3_4)
    env = {"PATH": "/usr/bin:/bin", "DPSIM_CHECK_SANDBOX": "1", "HOME": str(tmp_path)}
    checked = subprocess.run([str(python), "-I", str(script)], capture_output=True,
                             text=True, timeout=600, cwd=tmp_path, env=env)
    out = checked.stdout
    assert checked.returncode == 0, out + checked.stderr
    for ex in (e for e in all_exercises() if e.chapter == 3):
        n = len(ex.cases())
        assert f"PASS {ex.exercise_id} ({n}/{n})" in out, out
    assert "FAILED Exercise 3.4" in out, out
    assert "hint:" in out.split("FAILED Exercise 3.4")[1], out
    grade = subprocess.run([str(python), "-I", "-m", "dpsim", "grade", str(script)],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert grade.returncode == 2
    assert "holds no answer key" in grade.stdout
    print(f"kit built in {built_s:.1f} s, installed in {installed_s:.1f} s, all in "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)
