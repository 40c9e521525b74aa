"""python -m dpsim grade --slurm: a class graded as a job array on a real Slurm cluster
writes the same grades.csv, feedback files and results.json as a local batch of the same
submissions; a task that ends without a result is named and its student kept."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from dpsim.course.grading import box, grade, results
from dpsim.course.grading.grade import slurm as grade_slurm
from dpsim.course.grading.grade.submission import read_submission
from dpsim.course.grading.kernel import Limits
from dpsim.runtime import slurm
from dpsim.runtime.slurm.cluster import ROOT_VARIABLE
from tests.course.grading.adversarial import notebooks

NO_BOX = box.unavailable()
NO_SLURM = slurm.available()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NO_BOX is not None and not os.environ.get("DPSIM_REQUIRE_SANDBOX"),
                       reason=f"the OS sandbox is not available here: {NO_BOX}"),
    pytest.mark.skipif(NO_SLURM is not None and not os.environ.get("DPSIM_REQUIRE_SLURM"),
                       reason=f"Slurm is not installed here: {NO_SLURM}"),
]

WRONG_1_3 = ("from dpsim.grading import check\n"
             "def my_batch(n_params, activation_bytes_per_sample, memory_bytes, "
             "bytes_per_param=16):\n"
             "    return memory_bytes // activation_bytes_per_sample  # forgets the weights\n"
             'check("1.3", my_batch)\n')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.Cluster]:
    """A 2-node cluster that `grade --slurm` finds through DPSIM_SLURM_CLUSTER."""
    root = tmp_path_factory.mktemp("cluster")
    saved = os.environ.get(ROOT_VARIABLE)
    os.environ[ROOT_VARIABLE] = str(root)
    try:
        yield slurm.up(root)
    finally:
        slurm.down(root)
        if saved is None:
            del os.environ[ROOT_VARIABLE]
        else:
            os.environ[ROOT_VARIABLE] = saved


def _class(folder: Path) -> list[Path]:
    """alice: correct variants of several chapters' exercises; bob and carol: the same wrong
    1.3; dave: not a notebook."""
    scratch = folder.parent / "scratch"
    scratch.mkdir(parents=True)
    variants = notebooks.write(scratch, scratch / "marks")[1]
    paths = [folder / "alice" / "variants.ipynb", folder / "bob" / "01_memory.ipynb",
             folder / "carol" / "01_memory.ipynb", folder / "dave" / "01_memory.ipynb"]
    for path in paths:
        path.parent.mkdir(parents=True)
    paths[0].write_bytes(variants.read_bytes())
    nbformat.write(new_notebook(cells=[new_code_cell(WRONG_1_3)]), paths[2])
    paths[1].write_bytes(paths[2].read_bytes())
    paths[3].write_text("{not json")
    return paths


def _grade(paths: list[Path], out: Path, **options: object) -> tuple[int, str, float]:
    """grade.main on `paths` into `out`; (exit code, what it printed, seconds)."""
    printed = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(printed):
        # 60 s a cell: no honest cell comes near it, even with the array's tasks side by side
        rc = grade.main([str(p) for p in paths], cell_timeout_s=60.0, out_dir=str(out),
                        **options)  # type: ignore[arg-type]
    return rc, printed.getvalue(), time.monotonic() - start


def _files(folder: Path) -> dict[str, str]:
    """Every file under `folder` by its relative path, with its text."""
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_class_on_slurm_gets_the_local_batchs_files(cluster: slurm.Cluster,
                                                       tmp_path: Path) -> None:
    paths = _class(tmp_path / "class")
    local_rc, local_out, local_s = _grade(paths, tmp_path / "local")
    slurm_rc, slurm_out, slurm_s = _grade(paths, tmp_path / "slurm", slurm="")
    assert "grade: Slurm job" in slurm_out
    assert (slurm_rc, _files(tmp_path / "slurm")) == (local_rc, _files(tmp_path / "local")), (
        local_out, slurm_out)
    rows = {r["student"]: r for r in csv.DictReader(io.StringIO(
        (tmp_path / "slurm" / "grades.csv").read_text()))}
    assert list(rows) == ["alice", "bob", "carol", "dave"]
    assert rows["alice"]["total"] == rows["alice"]["max"] == str(sum(notebooks.VARIANTS.values()))
    assert (rows["bob"]["1.3"], rows["carol"]["1.3"], rows["dave"]["total"]) == ("0", "0", "0")
    assert [r["grader_errors"] for r in rows.values()] == ["0", "0", "0", "0"]
    assert "identical notebooks" in slurm_out
    print(f"measured: 4 students graded locally in {local_s:.1f} s, on Slurm in {slurm_s:.1f} s")


def test_gradescope_results_are_the_same_on_slurm(cluster: slurm.Cluster,
                                                  tmp_path: Path) -> None:
    paths = _class(tmp_path / "class")[3:]  # no kernel runs: what is compared is the merge
    options = {"output_format": "gradescope", "exercises": "1", "student": "s1"}
    local = _grade(paths, tmp_path / "local", **options)
    on_slurm = _grade(paths, tmp_path / "slurm", slurm="", **options)
    assert on_slurm[0] == local[0], (local[1], on_slurm[1])
    files = [_files(tmp_path / where) for where in ("local", "slurm")]
    reports = [json.loads(f.pop("results.json")) for f in files]
    for report in reports:
        del report["execution_time"]  # the wall time of each run
    assert reports[0] == reports[1]
    assert files[0] == files[1]


def test_a_task_without_a_result_is_named_and_its_student_kept(cluster: slurm.Cluster,
                                                               tmp_path: Path) -> None:
    paths = _class(tmp_path / "class")[2:]
    subs = [read_submission(p, root=tmp_path / "class") for p in paths]
    job = grade_slurm.prepare(subs, Limits(15.0, 150.0), isolate=True, exercises=None,
                              work=tmp_path / "work")
    job_id = slurm.submit(cluster, job.script, cwd=Path.cwd())
    slurm.cancel(cluster, f"{job_id}_0")  # carol's task: cancelled before it could finish
    state = slurm.wait(cluster, job_id, timeout_s=300)
    grades, crashed, failed = grade_slurm.merge(job, subs, state)
    assert [g.student for g in grades] == ["carol", "dave"]
    assert (grades[0].failed_runs, crashed) == (1, 1)
    assert grades[0].notes[0].startswith(f"grader error: Slurm task {job_id}_0 ")
    assert "CANCELLED" in grades[0].notes[0] or "cancelled before it started" in grades[0].notes[0]
    assert len(failed) == 1
    assert "carol" in failed[0]
    assert str(job.log(0)) in failed[0]
    assert grades[1].failed_runs == 0  # dave's task ran: his notebook could not be read
    assert "could not be read" in " ".join(grades[1].notes)
    students = results.by_student(grades)
    assert [s.errors for s in students] == [1, 0]


def test_a_job_sbatch_refuses_keeps_every_student(cluster: slurm.Cluster,
                                                  tmp_path: Path) -> None:
    paths = _class(tmp_path / "class")[2:]
    rc, out, _ = _grade(paths, tmp_path / "out", slurm="--partition=nosuch")
    assert rc == 2, out
    assert "invalid partition" in out
    rows = (tmp_path / "out" / "grades.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows] == ["student", "carol", "dave"]
    assert all(row.split(",")[-2] == "1" for row in rows[1:])  # one grader error each
