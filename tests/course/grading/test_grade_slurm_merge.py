"""grade --slurm without a cluster: the options, the job array's script, and the merge that
puts each task's grades back in the batch's order and names a task that left none."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dpsim.__main__ import command_line
from dpsim.course.grading.grade import slurm as grade_slurm
from dpsim.course.grading.grade.submission import Submission
from dpsim.course.grading.kernel import Limits
from dpsim.course.grading.results import ExerciseGrade, NotebookGrade
from dpsim.runtime.slurm import JobState


def test_slurm_options() -> None:
    parse = command_line().parse_args
    assert parse(["grade", "a.ipynb"]).slurm is None
    assert parse(["grade", "--slurm", "a.ipynb", "b.ipynb"]).slurm == ""
    args = parse(["grade", "--slurm-sbatch=--partition=p --time=30", "a.ipynb"])
    assert (args.slurm, args.notebooks) == ("--partition=p --time=30", ["a.ipynb"])


def _subs(tmp_path: Path) -> list[Submission]:
    """Three notebooks of two students, interleaved: alice, bob, alice."""
    return [Submission(tmp_path / name, None, who, f"digest-{name}")
            for name, who in (("a1.ipynb", "alice"), ("b.ipynb", "bob"), ("a2.ipynb", "alice"))]


def test_the_script_is_an_array_of_one_task_per_student(tmp_path: Path) -> None:
    job = grade_slurm.prepare(_subs(tmp_path), Limits(60.0, 600.0), isolate=True,
                              exercises="1", work=tmp_path / "work")
    assert job.students == ("alice", "bob")
    assert job.time_limit_s == 2 * 600.0 + grade_slurm.TASK_MARGIN_S  # alice's two notebooks
    script = job.script.read_text()
    assert "#SBATCH --job-name=dpsim-grade --array=0-1\n" in script
    assert "--time=26 " in script
    assert f"-P -m dpsim.course.grading.grade.slurm {tmp_path / 'work'} " in script
    manifest = json.loads((tmp_path / "work" / "class.json").read_text())
    assert manifest["students"] == [
        {"student": "alice", "paths": [str(tmp_path / "a1.ipynb"), str(tmp_path / "a2.ipynb")]},
        {"student": "bob", "paths": [str(tmp_path / "b.ipynb")]}]
    assert (manifest["exercises"], manifest["isolate"]) == ("1", True)


def test_the_merge_keeps_the_order_and_names_a_task_without_a_result(tmp_path: Path) -> None:
    subs = _subs(tmp_path)
    job = grade_slurm.prepare(subs, Limits(), isolate=True, exercises=None, work=tmp_path / "w")
    alices = [NotebookGrade(str(s.path), student="alice", digest=s.digest, seconds=1.5,
                            notes=["a note \udce9"],
                            grades={"1.3": ExerciseGrade("1.3", 1, 1, title="t")})
              for s in (subs[0], subs[2])]
    job.result(0).write_text(json.dumps({"student": "alice", "crashed": 0, "grades": [
        dataclasses.asdict(g) for g in alices]}))
    state = JobState(job_id=7, state="FAILED", exit_code=1, tasks=(
        JobState(job_id=7, state="COMPLETED", exit_code=0, array_task_id=0),
        JobState(job_id=8, state="FAILED", exit_code=1, reason="NonZeroExitCode",
                 array_task_id=1)))
    grades, crashed, failed = grade_slurm.merge(job, subs, state)
    assert [g.path for g in grades] == [str(s.path) for s in subs]
    assert grades[0] == alices[0]
    assert grades[2] == alices[1]  # read back as written, a lone surrogate included
    assert (grades[1].student, grades[1].failed_runs, crashed) == ("bob", 1, 1)
    assert grades[1].notes == [
        f"grader error: Slurm task 7_1 ended FAILED (exit code 1, NonZeroExitCode); "
        f"its log: {job.log(1)}"]
    assert failed == [f"Slurm task 7_1 ended FAILED (exit code 1, NonZeroExitCode) without "
                      f"grading bob; its log: {job.log(1)}"]


def test_without_slurm_every_notebook_is_a_grader_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(grade_slurm.slurm, "available", lambda: "Slurm is not installed here")
    grades, crashed = grade_slurm.grade_on_slurm(_subs(tmp_path), Limits(), True, None)
    assert crashed == 3
    assert [(g.student, g.failed_runs) for g in grades] == [("alice", 1), ("bob", 1),
                                                           ("alice", 1)]
    assert grades[1].notes == ["grader error: not graded: Slurm is not installed here"]
    assert "grade: ERROR: --slurm: Slurm is not installed here" in capsys.readouterr().out
