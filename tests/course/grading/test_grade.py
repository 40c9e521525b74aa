"""python -m dpsim grade: cheats earn nothing, attacks on the batch harm no one, correct
variants earn full points, nothing a notebook starts outlives its grading.

One grading run (module fixture), each notebook in its own OS box, of four students: an
honest one (alice), one full of in-kernel tricks (tests/course/grading/adversarial/
notebooks.py), one attacking the batch (batch_attacks.py) and a second honest one (bob)
graded after the attacker, whose file the attacker tries to read and spoil."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

import pytest

from dpsim.course.grading import box, compare, grade, results
from dpsim.course.grading.grade import collect, report, submission
from dpsim.course.grading.registry import get_exercise, student_seed
from dpsim.course.grading.results import ExerciseGrade, NotebookGrade, StudentGrade, score_table
from tests.course.grading.adversarial import batch_attacks, notebooks

Graded = tuple[dict[str, dict[str, str]], str, Path, dict[str, object]]
NO_BOX = box.unavailable()
needs_box = pytest.mark.skipif(
    NO_BOX is not None and not os.environ.get("DPSIM_REQUIRE_SANDBOX"),
    reason=f"the OS sandbox is not available here: {NO_BOX}")


def _processes() -> dict[int, tuple[int, int, int]]:
    """pid -> (uid, parent pid, start time in clock ticks since boot) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            uid = os.stat(f"/proc/{entry}").st_uid
            fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            table[int(entry)] = (uid, int(fields[1]), int(fields[19]))
    return table


def _started_here(uid: int, before: Collection[tuple[int, int]] = ()) -> list[int]:
    """Processes of `uid` that descend from this test process and are not in `before`
    ((pid, start time) pairs taken earlier): what this test started, not another grader's
    boxes nor a daemon running as the same uid. A box cannot leave its descent from the
    grader: every process of a box lives in that box's pid namespace, whose first process
    (a child of the grader's bwrap, killed with it: --die-with-parent) outlives them all."""
    table = _processes()
    me = os.getpid()
    found = []
    for pid, (owner, _, start) in table.items():
        if owner != uid or (pid, start) in before:
            continue
        seen, up = set(), pid
        while up in table and up not in seen and up > 1:
            seen.add(up)
            up = table[up][1]
            if up == me:
                found.append(pid)
                break
    return found


def _snapshot(uid: int) -> set[tuple[int, int]]:
    return {(pid, start) for pid, (owner, _, start) in _processes().items() if owner == uid}


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Graded:
    """Grade the four students once, with a grading secret and short cell limits."""
    folder = tmp_path_factory.mktemp("students")
    for name in ("alice", "tricks", "mallory", "bob", "marks", "grader_cwd"):
        (folder / name).mkdir()
    out_dir = folder / "out"
    alice = notebooks.write(folder / "tricks", folder / "marks")[1].rename(
        folder / "alice" / "variants.ipynb")
    tricks = folder / "tricks" / "01_tricks.ipynb"
    bob = folder / "bob" / "variants.ipynb"
    bob.write_bytes(alice.read_bytes())
    installed = [compare.__file__]
    saved = {path: Path(path).read_bytes() for path in installed}
    attacks = batch_attacks.write(folder / "mallory" / "attacks.ipynb", out=out_dir,
                                  submissions=folder / "alice", grader_cwd=folder / "grader_cwd",
                                  classmate=bob, grader_pid=os.getpid(), installed=installed)
    bob_digest = hashlib.sha256(bob.read_bytes()).hexdigest()
    out = io.StringIO()
    before = _snapshot(box.BOX_UID)  # what ran as the box's uid before this batch
    os.environ[grade.SECRET_VARIABLE] = "test-secret"
    cwd = Path.cwd()
    os.chdir(folder / "grader_cwd")
    try:
        with contextlib.redirect_stdout(out):
            rc = grade.main([str(p) for p in (alice, tricks, attacks, bob)],
                             cell_timeout_s=15.0, out_dir=str(out_dir))
    finally:
        os.chdir(cwd)
        del os.environ[grade.SECRET_VARIABLE]
        changed = [path for path, data in saved.items() if Path(path).read_bytes() != data]
        for path in changed:
            Path(path).write_bytes(saved[path])
    csv_text = (out_dir / "grades.csv").read_text()
    time.sleep(1.0)  # anything left behind would rewrite the results now
    rows = {r["student"].split("/")[0]: r for r in csv.DictReader(io.StringIO(csv_text))}
    facts = {"rc": rc, "csv_text": csv_text, "folder": folder, "bob": bob,
             "bob_digest": bob_digest, "installed_changed": changed, "before": before}
    return rows, out.getvalue(), out_dir, facts


@needs_box
@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", sorted(notebooks.TRICKS))
def test_every_trick_earns_nothing(graded: Graded, exercise_id: str) -> None:
    rows, out, _, _ = graded
    assert rows["tricks"][exercise_id] == "0", (notebooks.TRICKS[exercise_id], out)


@needs_box
@pytest.mark.slow
@pytest.mark.parametrize("exercise_id", sorted(batch_attacks.ATTACKS))
def test_every_attack_earns_nothing(graded: Graded, exercise_id: str) -> None:
    rows, out, _, _ = graded
    assert rows["mallory"][exercise_id] in ("0", "error"), (batch_attacks.ATTACKS[exercise_id],
                                                           out)


@needs_box
@pytest.mark.slow
def test_an_attacker_cannot_shrink_its_maximum(graded: Graded) -> None:
    """Killing its own checking process makes a grader error, which scores 0 of its points."""
    rows, out, _, facts = graded
    row = rows["mallory"]
    assert row["total"] == "0", out
    assert row["max"] == str(sum(get_exercise(i).points for i in batch_attacks.ATTACKS))
    assert row["1.4"] == "error", out
    assert facts["rc"] == 2, out


@needs_box
@pytest.mark.slow
def test_honest_classmates_keep_full_marks(graded: Graded) -> None:
    rows, out, _, facts = graded
    for who in ("alice", "bob"):
        row = rows[who]
        assert {i: row[i] for i in notebooks.VARIANTS} == {
            i: str(p) for i, p in notebooks.VARIANTS.items()}, (who, out)
        assert row["total"] == row["max"] == str(sum(notebooks.VARIANTS.values()))
        assert row["grader_errors"] == "0"
    bob = Path(str(facts["bob"]))
    assert hashlib.sha256(bob.read_bytes()).hexdigest() == facts["bob_digest"]
    assert rows["tricks"]["6.4"] == "2", out
    assert rows["tricks"]["grader_errors"] == "0", out
    assert "identical notebooks" in out
    assert "alice/variants.ipynb" in out


@needs_box
@pytest.mark.slow
def test_results_are_the_graders_alone(graded: Graded) -> None:
    """Written once, after every box is gone; nothing planted ran; no process survives."""
    _, out, out_dir, facts = graded
    folder = Path(str(facts["folder"]))
    assert (out_dir / "grades.csv").read_text() == facts["csv_text"]
    assert "forged" not in str(facts["csv_text"])
    assert not (out_dir / "planted").exists()
    for where in ("alice", "grader_cwd"):
        assert not list((folder / where).glob("*.py")), where
    assert facts["installed_changed"] == []
    assert _with_marker(batch_attacks.MARKER) == []
    # this batch's own boxes only: another grader's, or a daemon running as nobody, is not
    # this test's to judge (test_survivors_are_told_apart shows what this sees)
    before = facts["before"]
    assert isinstance(before, set)
    assert _started_here(box.BOX_UID, before) == []
    assert "source changed" not in out


@needs_box
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="starts a process of uid 65534 outside a box (root, setpriv)")
def test_survivors_are_told_apart() -> None:
    """A box of this test that outlives it is seen; a process of the same uid that this test
    did not start (another grader's, a daemon's), or that ran before, is not."""
    uid = box.BOX_UID
    earlier = subprocess.Popen(box.command(["sleep", "60"], None, {}, box.BoxLimits()))
    try:
        time.sleep(0.5)
        before = _snapshot(uid)
        assert _started_here(uid, before) == []
        ours = subprocess.Popen(box.command(["sleep", "60"], None, {}, box.BoxLimits()))
        # not this test's: started in a session of its own whose starter exits at once, so
        # its parent is init (or whichever subreaper is above this process)
        marker = f"dpsim-not-this-tests-{os.getpid()}-{time.monotonic_ns()}"
        subprocess.run(["setsid", "-f", "setpriv", f"--reuid={uid}", f"--regid={uid}",
                        "--clear-groups", sys.executable, "-c", "import time; time.sleep(60)",
                        marker], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _with_marker(marker):
            time.sleep(0.1)
        outsider = _with_marker(marker)[0]
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not _started_here(uid, before):
                time.sleep(0.1)
            seen = _started_here(uid, before)
            assert seen, "a surviving box of this test must be seen"
            assert outsider in _processes()
            assert outsider not in seen
            assert outsider not in _started_here(uid)  # nor by the plain uid, once outside
            assert not {pid for pid, start in before} & set(seen)  # the earlier box: not
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(outsider, 9)
            ours.kill()
            ours.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _started_here(uid, before):
            time.sleep(0.1)
        assert _started_here(uid, before) == []
    finally:
        earlier.kill()
        earlier.wait(10)


@needs_box
@pytest.mark.slow
def test_the_log_cannot_be_forged(graded: Graded) -> None:
    _, out, _, _ = graded
    forged = [line for line in out.splitlines() if "FORGED-LINE" in line or "graded 9" in line]
    assert forged
    assert all(line.startswith("  | ") for line in forged), forged
    assert "\x1b" not in out


@needs_box
@pytest.mark.slow
def test_limits_inside_the_boxes(graded: Graded) -> None:
    _, out, _, _ = graded
    assert "ignored the interrupt and was killed" in out  # SIGINT ignored: SIGKILL
    assert "can't allocate memory" in out or "MemoryError" in out  # 20 GiB in the sandbox
    assert "too large to check" in out


@needs_box
@pytest.mark.slow
def test_feedback_files(graded: Graded) -> None:
    _, _, out_dir, _ = graded
    feedback = sorted((out_dir / "feedback").glob("*.txt"))
    assert len(feedback) == 4
    tricks = next(p for p in feedback if p.name.startswith("tricks")).read_text()
    assert "1.1: 0/2 failed" in tricks
    assert "input:" in tricks


@needs_box
@pytest.mark.slow
def test_gradescope_counts_each_exercise_once(tmp_path: Path) -> None:
    """Three copies of one submission and a malformed notebook of the same student: each
    exercise once, Gradescope's fields, and a results.json although a notebook is broken."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cell = ("from dpsim.grading import check\n"
            "def my_batch(n_params, activation_bytes_per_sample, memory_bytes, "
            "bytes_per_param=16):\n"
            "    return max(memory_bytes - n_params * bytes_per_param, 0) "
            "// activation_bytes_per_sample\n"
            'check("1.3", my_batch)\n')
    paths = [tmp_path / f"{name}.ipynb" for name in ("a", "b", "c")]
    nbformat.write(new_notebook(cells=[new_code_cell(cell)]), paths[0])
    for path in paths[1:]:
        path.write_bytes(paths[0].read_bytes())
    (tmp_path / "01_broken.ipynb").write_text("{not json")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = grade.main([*map(str, paths), str(tmp_path / "01_broken.ipynb")],
                         out_dir=str(tmp_path / "out"), output_format="gradescope",
                         student="s1", visibility="after_published", exercises="1")
    assert rc == 0, out.getvalue()
    assert out.getvalue().count("grading ") == 2  # a.ipynb and the broken one
    got = json.loads((tmp_path / "out" / "results.json").read_text())
    numbers = [t["number"] for t in got["tests"]]
    assert numbers == sorted(set(numbers), key=lambda i: tuple(map(int, i.split("."))))
    assert got["score"] == get_exercise("1.3").points
    assert sum(t["max_score"] for t in got["tests"]) == sum(
        get_exercise(f"1.{i}").points for i in range(1, 6))
    assert {"score", "execution_time", "output", "visibility", "stdout_visibility",
            "tests"} <= got.keys()
    for test in got["tests"]:
        assert {"name", "number", "score", "max_score", "status", "output",
                "visibility"} <= test.keys()
        assert test["visibility"] == "after_published"
    assert "could not be read" in got["output"]


def test_many_students_need_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """Without the OS sandbox the grader refuses a batch of several students, before
    running any notebook; Gradescope output is one student's."""
    import nbformat
    from nbformat.v4 import new_notebook

    paths = []
    for who in ("alice", "bob"):
        (tmp_path / who).mkdir()
        paths.append(tmp_path / who / "01_x.ipynb")
        nbformat.write(new_notebook(), paths[-1])
    monkeypatch.setattr(box, "unavailable", lambda: "no bubblewrap (test)")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert grade.main(list(map(str, paths))) == 2
        assert grade.main(list(map(str, paths)), output_format="gradescope",
                           out_dir=str(tmp_path / "o"), isolation=True, exercises="1") == 2
        assert grade.main(list(map(str, paths[:1])), output_format="gradescope",
                           out_dir=str(tmp_path / "o")) == 2
    assert "refusing to grade 2 students" in out.getvalue()
    assert "grades one student's submission" in out.getvalue()
    assert "needs --exercises" in out.getvalue()
    assert "grading " not in out.getvalue()


@pytest.mark.slow
def test_checks_share_the_notebooks_time(tmp_path: Path) -> None:
    """Unboxed (--no-isolation), a function that never returns, passed to check() under
    three names, costs the notebook's limit once, not 120 s per name."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    cell = ("def spin(*args, **kwargs):\n    while True:\n        pass\n"
            "a = b = c = spin\n"
            'check("1.3", a)\ncheck("1.3", b)\ncheck("1.3", c)\n')
    path = tmp_path / "spin.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(cell)]), path)
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        rc = grade.main([str(path)], notebook_timeout_s=12.0, isolation=False)
    assert time.monotonic() - started < 60, out.getvalue()
    assert rc == 0
    assert "no OS sandbox" in out.getvalue()
    assert "0/1" in out.getvalue()


def test_report_names_and_text() -> None:
    assert results.feedback_name("alice/01_x.ipynb") != results.feedback_name("alice_01/x.ipynb")
    assert results.printable("a\x1b[2Jb\rc\nd") == "a?[2Jb?c\nd"
    assert report.quoted("x\ny") == "  | x\n  | y"
    assert results.printable("a\ud800b") == "a?b"
    assert results.one_line("jos\udce9\n\x1b[2J\ud800") == "jos\\xe9\\x0a\\x1b[2J\\ud800"
    assert results.one_line(results.one_line("a\nb")) == results.one_line("a\nb")
    for cell in ("=1+1", "+1", "-1", "@SUM(A1)"):
        assert results.csv_cell(cell) == "'" + cell
    for cell in ("\t=1", "\r=1"):  # escaped on one line: no longer a formula's start
        assert not results.csv_cell(cell).startswith(results.FORMULA_START), cell
    assert results.csv_cell("alice") == "alice"
    assert results.csv_text([["=HYPERLINK(1)", "1"]]) == "'=HYPERLINK(1),1\n"
    assert results.feedback_name("jos\udce9") != results.feedback_name("jos\udce8")


def test_reports_are_read_back(tmp_path: Path) -> None:
    assert results.write_checked(tmp_path / "r.txt", "ok\n") is None
    assert (tmp_path / "r.txt").read_text() == "ok\n"


def test_exercises_of_a_notebook() -> None:
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell('check("1.3", f)\ncheck("42.1", g)')])
    assert [e.exercise_id for e in submission.notebook_exercises(Path("x.ipynb"), nb)] == ["1.3"]
    ids = [e.exercise_id for e in submission.notebook_exercises(Path("01_x.ipynb"), nb)]
    assert ids[:3] == ["1.1", "1.2", "1.3"]
    assert submission.notebook_exercises(Path("notes.ipynb"), new_notebook()) == []
    ex = get_exercise("1.3")
    assert submission.graded_name(ex, nb) == "f"
    hedge = new_notebook(cells=[new_code_cell('check("1.3", gb)\ncheck("1.3", gib)')])
    assert submission.graded_name(ex, hedge) == "gib"  # the last one passed, no other
    assert submission.graded_name(ex, new_notebook()) == "largest_batch"  # the stub's
    assert [e.exercise_id for e in submission.notebook_exercises(
        Path("01_x.ipynb"), nb, submission.assignment("4.2,4.1"))] == ["4.1", "4.2"]
    with pytest.raises(ValueError, match="99"):
        submission.assignment("99")


def test_student_id_and_dump_parsing() -> None:
    from nbformat.v4 import new_notebook

    nb = new_notebook()
    assert submission.student_id(Path("/s/alice/01_x.ipynb")) == "alice/01_x.ipynb"
    assert submission.student_id(Path("/s/alice/01_x.ipynb"), root=Path("/s")) == "alice"
    assert submission.student_id(Path("/s/alice/a/b.ipynb"), root=Path("/s")) == "alice"
    assert submission.student_id(Path("/s/bob.ipynb"), root=Path("/s")) == "s/bob.ipynb"
    assert submission.student_id(Path("x.ipynb"), given="b7") == "b7"
    assert submission.claimed_id(nb) is None
    nb.metadata["dpsim"] = {"student": " a123 "}
    assert submission.claimed_id(nb) == "a123"  # a claim, never the id
    text = ('M {"f": "AAEC", "g": {"error": "could not be pickled: X"}, "h": "!!"}\n'
            'noise\nM not json\n')
    found = collect.parse_dump(text, "M ")
    assert found["f"] == b"\x00\x01\x02"
    assert found["g"] == "could not be pickled: X"
    assert isinstance(found["h"], str)


def test_score_table_per_student() -> None:
    """One row per student: each exercise's best result over their notebooks; a grader
    error reads `error` and counts toward the maximum."""
    a = NotebookGrade("a.ipynb", {"1.1": ExerciseGrade("1.1", 2, 2, None, "passed")},
                      student="ann")
    b = NotebookGrade("b.ipynb", {"1.3": ExerciseGrade("1.3", 0, 1, "boom", "error"),
                                  "1.1": ExerciseGrade("1.1", 0, 2, "wrong", "failed")},
                      student="ben")
    c = NotebookGrade("c.ipynb", {"1.1": ExerciseGrade("1.1", 0, 2, "wrong", "failed")},
                      student="ann")
    students = results.by_student([a, b, c])
    assert [s.student for s in students] == ["ann", "ben"]
    assert isinstance(students[0], StudentGrade)
    assert score_table(students) == [
        ["student", "1.1", "1.3", "total", "max", "grader_errors", "notebooks"],
        ["ann", "2", "", "2", "2", "0", "a.ipynb c.ipynb"],
        ["ben", "0", "error", "0", "3", "1", "b.ipynb"]]


@pytest.mark.slow
def test_the_grader_imports_nothing_from_its_folder(tmp_path: Path) -> None:
    """A module planted in the folder the grader runs from is not imported by it."""
    import subprocess
    import sys

    for name in ("nbformat", "cProfile", "tabulate"):
        (tmp_path / f"{name}.py").write_text("raise SystemExit('planted module ran')\n")
    done = subprocess.run([sys.executable, "-m", "dpsim", "grade", "missing.ipynb"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "planted" not in done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no such notebook" in done.stdout


AGREE_CELL = '''\
from dpsim.grading import check

def largest_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    return max(memory_bytes - n_params * bytes_per_param, 0) // activation_bytes_per_sample

def chunk_sizes(batch_size, n_devices):
    return [batch_size // n_devices] * n_devices  # drops the remainder

def gil_share(intervals):
    total = sum(end - start for _, start, end in intervals)
    return sum(end - start for kind, start, end in intervals if kind == "python") / total

check("1.3", largest_batch)
check("3.1", chunk_sizes)
check("4.2", gil_share)
'''


@pytest.mark.slow
def test_the_notebooks_check_and_the_grader_agree(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """For three students, the same functions through the notebook's `check()` path (the
    sandbox, `DPSIM_STUDENT`'s seed) and through `python -m dpsim grade` (the student's
    notebook, `--student`) pass and fail alike, with the same message."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from dpsim.course.grading import core
    from dpsim.course.grading.sandbox import Sandbox

    monkeypatch.delenv(grade.SECRET_VARIABLE, raising=False)
    space: dict[str, object] = {}
    exec(AGREE_CELL.split('check("1.3"')[0], space)  # the functions, not the checks
    ids = {"1.3": "largest_batch", "3.1": "chunk_sizes", "4.2": "gil_share"}
    students = ["ann", "ben", "cy"]
    subs = []
    for who in students:
        nb = new_notebook(cells=[new_code_cell(AGREE_CELL)], metadata={"dpsim": {"student": who}})
        nbformat.write(nb, tmp_path / f"{who}.ipynb")
        subs.append(grade.read_submission(tmp_path / f"{who}.ipynb", who))
    with contextlib.redirect_stdout(io.StringIO()), \
            grade.Grader(isolate=NO_BOX is None) as g:
        graded = {s.student: g.grade(s) for s in subs}
    with Sandbox() as sandbox:
        for who in students:
            for eid, name in ids.items():
                interactive = core.run_check(eid, space[name],  # type: ignore[arg-type]
                                             seed=student_seed(who), sandbox=sandbox)
                batch = graded[who].grades[eid]
                assert (batch.outcome == "passed") == interactive.ok, (who, eid, batch)
                assert batch.message == interactive.message, (who, eid)
    assert {graded[w].grades["3.1"].outcome for w in students} == {"failed"}
    assert {graded[w].grades["1.3"].outcome for w in students} == {"passed"}
