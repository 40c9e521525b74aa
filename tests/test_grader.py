"""python -m dpsim grade: full marks for answers, nothing for stubs, prints or patches."""

from __future__ import annotations

import contextlib
import csv
import io
import pickle
from pathlib import Path

import dill
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from dpsim.course import grader
from dpsim.course.grading.clean_process import CheckServer

ROOT = Path(__file__).resolve().parent.parent

WRONG_DEFS = '''\
def training_state_bytes(module, optimizer):
    return 0

def mlp_activation_bytes(batch_size, widths):
    return 0

def largest_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    return 0
'''
RIGHT_BATCH = '''\
def my_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    free = memory_bytes - n_params * bytes_per_param
    return 0 if free < 0 else free // activation_bytes_per_sample
'''
STUDENTS = {
    # prints the PASS lines itself
    "01_fake_pass.ipynb": [WRONG_DEFS, 'print("PASS 1.1 (3/3)")\nprint("PASS 1.2 (3/3)")\n'
                                       'print("PASS 1.3 (4/4)")'],
    # replaces check() and the comparison inside the kernel
    "01_patched.ipynb": [
        'import dpsim.course.grading as g\nimport dpsim.course.grading.core as core\n'
        'g.check = lambda *a: print("PASS")\ncore.same = lambda *a, **k: True',
        WRONG_DEFS,
        'g.check("1.1", training_state_bytes)\ncore.check("1.2", mlp_activation_bytes)\n'
        'from dpsim.grading import check\ncheck("1.3", largest_batch)'],
    # every answer raises
    "01_raises.ipynb": [WRONG_DEFS.replace("return 0", "raise ValueError('no idea')")],
    # no chapter in the name: exercises come from its check() calls; a cell never ends
    "student_loop.ipynb": ["while True:\n    pass", RIGHT_BATCH,
                           'from dpsim.grading import check\ncheck("1.3", my_batch)\n'
                           'check("1.1", training_state_bytes)'],
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, str]], str]:
    """Grade the solutions, the exercises and the cheating notebooks in one run."""
    folder = tmp_path_factory.mktemp("students")
    paths = [str(ROOT / "solutions" / "01_single_device.ipynb"),
             str(ROOT / "exercises" / "01_single_device.ipynb")]
    for name, sources in STUDENTS.items():
        nbformat.write(new_notebook(cells=[new_code_cell(s) for s in sources]), folder / name)
        paths.append(str(folder / name))
    csv_path = folder / "grades.csv"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = grader.main(paths, csv_path=str(csv_path), cell_timeout_s=6.0)
    assert rc == 0, out.getvalue()
    with open(csv_path, newline="") as f:
        rows = {Path(r["notebook"]).name if "exercises" not in r["notebook"] else "exercises":
                r for r in csv.DictReader(f)}
    return rows, out.getvalue()


@pytest.mark.slow
def test_solutions_get_full_marks(graded: tuple[dict[str, dict[str, str]], str]) -> None:
    rows, _ = graded
    row = rows["01_single_device.ipynb"]
    assert (row["1.1"], row["1.2"], row["1.3"], row["total"], row["max"]) == (
        "2", "2", "1", "5", "5")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exercises", "01_fake_pass.ipynb", "01_patched.ipynb",
                                  "01_raises.ipynb"])
def test_stubs_and_cheats_get_nothing(graded: tuple[dict[str, dict[str, str]], str],
                                      name: str) -> None:
    rows, _ = graded
    assert rows[name]["total"] == "0"
    assert rows[name]["max"] == "5"
    assert [rows[name][i] for i in ("1.1", "1.2", "1.3")] == ["0", "0", "0"]


@pytest.mark.slow
def test_endless_cell_is_cut_and_the_rest_still_graded(
        graded: tuple[dict[str, dict[str, str]], str]) -> None:
    rows, out = graded
    row = rows["student_loop.ipynb"]
    assert (row["1.1"], row["1.2"], row["1.3"], row["total"], row["max"]) == (
        "0", "", "1", "1", "3")
    assert "student_loop.ipynb: cell 0 was stopped after 6 s" in out
    assert "`training_state_bytes` is not defined in the notebook" in out


@pytest.mark.slow
def test_report_explains_each_zero(graded: tuple[dict[str, dict[str, str]], str]) -> None:
    _, out = graded
    assert "notebook" in out.splitlines()[out.splitlines().index("") + 1]  # the table header
    assert "Exercise 1.1 is not done yet" in out
    assert "your function raised ValueError: no idea" in out
    assert "your answer: 0" in out


def test_exercises_of_a_notebook() -> None:
    nb = new_notebook(cells=[new_code_cell('check("1.3", f)\ncheck("42.1", g)')])
    assert [e.exercise_id for e in grader.notebook_exercises(Path("x.ipynb"), nb)] == ["1.3"]
    ids = [e.exercise_id for e in grader.notebook_exercises(Path("01_x.ipynb"), nb)]
    assert ids[:3] == ["1.1", "1.2", "1.3"]
    assert all(i.startswith("1.") for i in ids)
    assert grader.notebook_exercises(Path("notes.ipynb"), new_notebook()) == []


def _main_function(source: str, name: str) -> bytes:
    """dill bytes of a function defined as if in a notebook (module __main__)."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(source, namespace)
    return dill.dumps(namespace[name], recurse=True)


@pytest.mark.slow
def test_clean_process_survives_hostile_functions(tmp_path: Path) -> None:
    found = {
        "loops": _main_function("def loops(*a, **k):\n    while True:\n        pass", "loops"),
        "exits": _main_function("def exits(*a, **k):\n    raise SystemExit(0)", "exits"),
        "kills": _main_function("def kills(*a, **k):\n    import os\n    os._exit(0)", "kills"),
        "bad": "could not be pickled: TypeError: nope",
    }
    dump = tmp_path / "functions.pkl"
    dump.write_bytes(pickle.dumps(found))
    plan = {"1.1": ["loops"], "1.2": ["exits"], "9.9": ["bad"], "1.3": ["kills"]}
    with CheckServer() as server:
        results, _ = server.check(dump, plan, tmp_path, timeout_s=2.0)
        assert "1.3" not in results  # os._exit killed the child; grade_notebook scores it 0
        (tmp_path / "again").mkdir()
        again, _ = server.check(dump, {"9.9": ["bad"]}, tmp_path / "again", timeout_s=2.0)
    assert again["9.9"]["message"].startswith("`bad` could not")  # the server lives on
    assert results["1.1"]["message"] == "the check took longer than 2 s"
    assert results["1.2"]["message"].startswith("checking stopped: SystemExit")
    assert results["9.9"]["message"] == "`bad` could not be pickled: TypeError: nope"


@pytest.mark.slow
def test_score_table_and_missing_file(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    a = grader.NotebookGrade("a.ipynb", {"1.1": grader.ExerciseGrade("1.1", 2, 2)})
    b = grader.NotebookGrade("b.ipynb", {"1.3": grader.ExerciseGrade("1.3", 0, 1, "wrong")})
    assert grader.score_table([a, b]) == [["notebook", "1.1", "1.3", "total", "max"],
                                          ["a.ipynb", "2", "", "2", "2"],
                                          ["b.ipynb", "", "0", "0", "1"]]
    assert grader.main([str(tmp_path / "nope.ipynb")]) == 1
    assert "nope.ipynb: no such notebook" in capsys.readouterr().out
