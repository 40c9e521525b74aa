"""`python -m dpsim grade --slurm`: a class graded as a Slurm job array, one task per student.

Each task grades one student's notebooks exactly as a local batch does (`batch.grade_all`:
each notebook in its own OS boxes, the same limits, the same assignment) and writes that
student's `NotebookGrade`s as JSON. The merge puts them back in the batch's order, so
`grade`'s own reporting writes the same grades.csv, feedback files and results.json as a
local batch of the same submissions. A task that fails, is cancelled, times out or is lost
leaves no result: each notebook of its student becomes a grader error naming the task, its
state and its log, so no student is dropped and the exit code says so.

The cluster is the kit's own (`dpsim.runtime.slurm`, in `DPSIM_SLURM_CLUSTER` or the
default folder): a running one is used as it is, else one is started for the batch and
stopped after it. The job runs from the grader's current folder (the notebooks' paths are
read as given); its script, the class manifest, the tasks' logs and results live in a work
folder of their own (`<tmp>/dpsim-grade-*`, kept when a task failed). On a real cluster,
the same files would need a filesystem every node sees; a job there runs as the user who
submitted it, which the boxes allow (bubblewrap maps uid 65534 in a user namespace of its
own when not root).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from dpsim.course.grading import results
from dpsim.course.grading.grade.batch import grade_all
from dpsim.course.grading.grade.submission import (
    Submission,
    assignment,
    common_folder,
    read_submission,
)
from dpsim.course.grading.kernel import Limits
from dpsim.course.grading.results import ExerciseGrade, NotebookGrade
from dpsim.runtime import slurm

TASK_MARGIN_S = 300.0  # a task's time limit beyond its notebooks' limits (boxes, a kernel)


@dataclasses.dataclass(frozen=True)
class ClassJob:
    """A class prepared for Slurm: the work folder and who each array task grades."""

    work: Path  # class.json, grade.sh, logs/<task>.out, results/<task>.json
    students: tuple[str, ...]  # task i grades students[i]
    time_limit_s: float  # each task's --time

    @property
    def script(self) -> Path:
        """The job script (sbatch reads it)."""
        return self.work / "grade.sh"

    def log(self, task: int) -> Path:
        """Task `task`'s standard output and error."""
        return self.work / "logs" / f"{task}.out"

    def result(self, task: int) -> Path:
        """Task `task`'s grades (written once, when it finished)."""
        return self.work / "results" / f"{task}.json"


def prepare(subs: list[Submission], limits: Limits, isolate: bool, exercises: str | None,
            work: Path | None = None) -> ClassJob:
    """Write the class manifest and the job array's script (one task per student)."""
    work = work or Path(tempfile.mkdtemp(prefix="dpsim-grade-"))
    (work / "logs").mkdir(parents=True, exist_ok=True)
    (work / "results").mkdir(exist_ok=True)
    students = tuple(dict.fromkeys(s.student for s in subs))
    per_student = {who: [str(s.path) for s in subs if s.student == who] for who in students}
    most = max((len(paths) for paths in per_student.values()), default=1)
    job = ClassJob(work, students, most * limits.notebook_timeout_s + TASK_MARGIN_S)
    manifest = {"root": str(common_folder([s.path for s in subs])) if subs else ".",
                "students": [{"student": who, "paths": per_student[who]} for who in students],
                "limits": dataclasses.asdict(limits), "isolate": isolate,
                "exercises": exercises}
    (work / "class.json").write_text(json.dumps(manifest, indent=1) + "\n")
    minutes = int(job.time_limit_s // 60) + 1
    command = shlex.join([sys.executable, "-P", "-m", __name__, str(work)])
    job.script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH --job-name=dpsim-grade --array=0-{max(len(students), 1) - 1}\n"
        f"#SBATCH --ntasks=1 --time={minutes} --output={work / 'logs'}/%a.out\n"
        f'exec {command} "$SLURM_ARRAY_TASK_ID"\n')
    return job


def run_task(work: Path, task: int) -> int:
    """One array task: grade student `task` of the class in `work`, write its result."""
    manifest = json.loads((work / "class.json").read_text())
    entry = manifest["students"][task]
    root = Path(manifest["root"])
    subs = [read_submission(Path(p), entry["student"], root) for p in entry["paths"]]
    only = assignment(manifest["exercises"]) if manifest["exercises"] is not None else None
    grades, crashed = grade_all(subs, Limits(**manifest["limits"]),
                                isolate=manifest["isolate"], only=only)
    record = {"student": entry["student"], "crashed": crashed,
              "grades": [dataclasses.asdict(g) for g in grades]}
    tmp = work / "results" / f".{task}.json.tmp"
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(work / "results" / f"{task}.json")
    return 0


def _notebook_grade(data: dict[str, object]) -> NotebookGrade:
    """A NotebookGrade back from its JSON."""
    fields = dict(data)
    raw = fields.pop("grades")
    assert isinstance(raw, dict)
    grade = NotebookGrade(**fields)  # type: ignore[arg-type]
    grade.grades = {k: ExerciseGrade(**v) for k, v in raw.items()}
    return grade


def _read_result(job: ClassJob, task: int) -> tuple[list[NotebookGrade], int] | None:
    """Task `task`'s grades and grader failures, or None when it left no valid result."""
    try:
        record = json.loads(job.result(task).read_text())
        if record["student"] != job.students[task]:
            return None
        return [_notebook_grade(g) for g in record["grades"]], int(record["crashed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def merge(job: ClassJob, subs: list[Submission], state: slurm.JobState
          ) -> tuple[list[NotebookGrade], int, list[str]]:
    """Every submission's grade in the batch's order; (grades, grader failures, the failed
    tasks named). A task with no result makes each of its student's notebooks a grader
    error naming the task, its state and its log."""
    by_task = {t.array_task_id: t for t in state.tasks} if state.tasks else {0: state}
    per_student: dict[str, list[NotebookGrade]] = {}
    crashed, failed = 0, []
    for task, who in enumerate(job.students):
        found = _read_result(job, task)
        if found is not None:
            per_student[who], lost = found
            crashed += lost
            continue
        info = by_task.get(task)
        what = (f"Slurm task {state.job_id}_{task} ended {info.state} (exit code "
                f"{info.exit_code}, {info.reason})" if info is not None else
                f"Slurm task {state.job_id}_{task} is not known to Slurm (cancelled before "
                f"it started, or lost)")
        failed.append(f"{what} without grading {results.one_line(who)}; its log: "
                      f"{job.log(task)}")
        per_student[who] = [NotebookGrade(str(s.path), student=s.student, digest=s.digest,
                                          failed_runs=1,
                                          notes=[f"grader error: {what}; its log: "
                                                 f"{job.log(task)}"])
                            for s in subs if s.student == who]
        crashed += len(per_student[who])
    queues = {who: list(grades) for who, grades in per_student.items()}
    return [queues[s.student].pop(0) for s in subs], crashed, failed


def _not_graded(subs: list[Submission], why: str) -> tuple[list[NotebookGrade], int]:
    """Every notebook a grader error saying `why` (no student is dropped)."""
    print(f"grade: ERROR: --slurm: {results.one_line(why)}")
    return [NotebookGrade(str(s.path), student=s.student, digest=s.digest, failed_runs=1,
                          notes=[f"grader error: not graded: {why}"]) for s in subs], len(subs)


def _run(cluster: slurm.Cluster, job: ClassJob, subs: list[Submission], sbatch_args: str
         ) -> tuple[list[NotebookGrade], int, list[str]]:
    """Submit the array, wait for every task (cancelling it after its time), merge."""
    job_id = slurm.submit(cluster, job.script, cwd=Path.cwd(),
                          extra_args=shlex.split(sbatch_args))
    print(f"grade: Slurm job {job_id} on {cluster.root}: {len(job.students)} task(s), one "
          f"per student; logs in {job.work / 'logs'}", flush=True)
    start = time.monotonic()
    try:
        state = slurm.wait(cluster, job_id, timeout_s=job.time_limit_s * len(job.students))
    except TimeoutError as exc:
        slurm.cancel(cluster, job_id)
        state = slurm.JobState(job_id=job_id, state="LOST", exit_code=None, reason=str(exc))
    print(f"grade: Slurm job {job_id} ended in {time.monotonic() - start:.1f} s", flush=True)
    return merge(job, subs, state)


def grade_on_slurm(subs: list[Submission], limits: Limits, isolate: bool,
                   exercises: str | None, sbatch_args: str = ""
                   ) -> tuple[list[NotebookGrade], int]:
    """Grade `subs` as a job array on the kit's Slurm cluster, one task per student;
    (the grades in the batch's order, how many notebooks the grader failed on).
    `sbatch_args` ("--partition=x --time=30") go on sbatch's command line, over the
    script's own #SBATCH lines. Where no job can run (Slurm missing, the cluster does not
    start, sbatch refuses the job), every notebook is a grader error saying why."""
    if not subs:
        return [], 0
    missing = slurm.available()
    if missing is not None:
        return _not_graded(subs, missing)
    now = slurm.status()
    started_here = now is None  # only a cluster started here is stopped after
    try:  # a healthy cluster is used as it is, whatever its size; up() mends a killed node
        cluster = now.cluster if now is not None and now.healthy else slurm.up()
    except (RuntimeError, ValueError) as exc:
        return _not_graded(subs, f"the Slurm cluster did not start: {exc}")
    job = prepare(subs, limits, isolate, exercises)
    try:
        grades, crashed, failed = _run(cluster, job, subs, sbatch_args)
    except (RuntimeError, ValueError) as exc:  # sbatch refused the job: nothing ran
        shutil.rmtree(job.work, ignore_errors=True)
        return _not_graded(subs, str(exc))
    finally:
        if started_here:
            slurm.down(cluster.root)
    for line in failed:
        print(f"grade: ERROR: {line}")
    owners: dict[str, set[str]] = {}
    for sub in subs:
        owners.setdefault(sub.digest, set()).add(sub.student)
    for digest, names in owners.items():
        if len(names) > 1:
            print(f"grade: identical notebooks (sha256 {digest[:12]}) from "
                  f"{len(names)} students: {', '.join(sorted(map(results.one_line, names)))}")
    if not failed:
        shutil.rmtree(job.work, ignore_errors=True)
    return grades, crashed


if __name__ == "__main__":  # an array task: python -P -m dpsim.course.grading.grade.slurm WORK I
    sys.exit(run_task(Path(sys.argv[1]), int(sys.argv[2])))
