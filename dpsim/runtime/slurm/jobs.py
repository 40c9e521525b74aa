"""Jobs on a `Cluster`: submit a batch script, wait for its final state, cancel or requeue
it, and read its logs.

There is no accounting (no sacct): what a job did is read from `scontrol show job` and
`scontrol show step` while slurmctld holds it (MinJobAge: 300 s after it ends). `wait`
polls them and keeps each step it saw. Job ids start at 1 again on every fresh cluster, so a
job's output file names should not outlive the cluster's folder (use a fresh `cwd`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from dpsim.runtime.slurm.cluster import Cluster
from dpsim.runtime.slurm.commands import key_values, slurm

# srun --output=RANK_LOG (in the job's folder): one log per rank, "<job id>-rank<rank>.log"
RANK_LOG = "%j-rank%t.log"
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                   "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "LOST"})
POLL_S = 0.25


@dataclass(frozen=True)
class StepInfo:
    """A job step (`srun` in the script, or "batch": the script itself) as last seen."""

    step_id: str  # "7.0", "7.batch"
    nodes: str  # its node list, "n[1-2]"
    tasks: int
    state: str  # RUNNING while seen; steps leave scontrol when they end


@dataclass(frozen=True)
class JobState:
    """A job's final (or last seen) state, from scontrol."""

    job_id: int  # for an array task: the task's own job id
    state: str  # COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ...; LOST: no longer known
    exit_code: int | None  # the batch script's exit status (None: not known)
    signal: int = 0  # the signal that ended it, 0 if none
    reason: str = ""  # Slurm's Reason= (why it waits or failed)
    nodes: str = ""  # its node list, "n[1-2]"
    batch_host: str = ""  # the node that ran the script
    restarts: int = 0  # how often it was requeued
    run_time_s: float = 0.0
    stdout: Path | None = None
    stderr: Path | None = None
    array_task_id: int | None = None
    steps: tuple[StepInfo, ...] = ()
    tasks: tuple[JobState, ...] = field(default=())  # an array job: each task's state

    @property
    def ok(self) -> bool:
        """Completed with exit status 0 (every task, for an array)."""
        if self.tasks:
            return all(task.ok for task in self.tasks)
        return self.state == "COMPLETED" and self.exit_code == 0


def submit(cluster: Cluster, script: Path, *, cwd: Path, extra_args: Sequence[str] = (),
           requeue: bool = False) -> int:
    """`sbatch` `script` from folder `cwd` (the job's working folder); return the job id.

    `extra_args` go before the script and win over its `#SBATCH` lines. `requeue` adds
    `--requeue --open-mode=append`: a requeued job then appends to its output instead of
    truncating it.
    """
    if not script.is_file():
        raise ValueError(f"script={str(script)!r} is not a file; allowed: a job script's path")
    if not cwd.is_dir():
        raise ValueError(f"cwd={str(cwd)!r} is not a folder; allowed: the job's folder")
    args = ["--parsable", f"--chdir={cwd}"]
    if requeue:
        args += ["--requeue", "--open-mode=append"]
    done = slurm(cluster, "sbatch", *args, *extra_args, str(script))
    return int(done.stdout.strip().split(";")[0])


def cancel(cluster: Cluster, job_id: int | str, *, signal: str | None = None) -> None:
    """`scancel` the job (with `signal`, e.g. "TERM": send it to every process of the job,
    the batch script included, without cancelling it)."""
    extra = [f"--signal={signal}", "--full"] if signal else []
    slurm(cluster, "scancel", *extra, str(job_id))


def requeue(cluster: Cluster, job_id: int | str) -> None:
    """`scontrol requeue`: end the running job and put it back in the queue (same job id;
    it starts again from its script, `restarts` one higher)."""
    slurm(cluster, "scontrol", "requeue", str(job_id))


def wait(cluster: Cluster, job_id: int | str, timeout_s: float = 300.0) -> JobState:
    """Poll until the job (every task, for an array job's id) reaches a final state; return
    it with the steps seen on the way. TimeoutError after `timeout_s` seconds, naming the
    state last seen. A job slurmctld no longer knows comes back as state LOST."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r} is not allowed; allowed: seconds above 0")
    deadline = time.monotonic() + timeout_s
    steps: dict[str, StepInfo] = {}
    seen: list[JobState] = []
    while True:
        records = _job_records(cluster, job_id)
        if records is None:
            return _lost(job_id, seen)
        seen = [_job_state(r) for r in records]
        if len(records) == 1:
            for step in _steps(cluster, job_id):
                steps[step.step_id] = step
        if seen and all(s.state in FINAL for s in seen) and not _pending_tasks(records):
            return _combine(seen, steps, job_id)
        if time.monotonic() > deadline:
            last = ", ".join(f"{s.job_id} {s.state}" for s in seen)
            raise TimeoutError(f"job {job_id} did not end within {timeout_s:.0f} s ({last})")
        time.sleep(POLL_S)


def job_log(state: JobState) -> str:
    """The job's standard output file as text ("" when there is none)."""
    if state.stdout is None:
        return ""
    try:
        return state.stdout.read_text(errors="replace")
    except OSError:
        return ""


def rank_logs(folder: Path, job_id: int) -> dict[int, str]:
    """Each rank's log of job `job_id`, written by `srun --output=RANK_LOG` in `folder`."""
    logs = {}
    for path in folder.glob(f"{job_id}-rank*.log"):
        rank = path.name[len(f"{job_id}-rank"):-len(".log")]
        if rank.isdigit():
            logs[int(rank)] = path.read_text(errors="replace")
    return dict(sorted(logs.items()))


def _job_records(cluster: Cluster, job_id: int | str) -> list[dict[str, str]] | None:
    """scontrol's records of the job (one per array task); None when it is not known."""
    done = slurm(cluster, "scontrol", "show", "job", "-o", str(job_id), check=False)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return None
        raise RuntimeError(f"scontrol show job {job_id}: {done.stderr.strip()}")
    return [key_values(line) for line in done.stdout.splitlines() if line.startswith("JobId=")]


def _pending_tasks(records: list[dict[str, str]]) -> bool:
    """True when one record stands for array tasks not started yet ("ArrayTaskId=3-9")."""
    return any(not r.get("ArrayTaskId", "0").isdigit() and r.get("ArrayTaskId") != "(null)"
               for r in records if "ArrayTaskId" in r)


def _steps(cluster: Cluster, job_id: int | str) -> list[StepInfo]:
    """The job's steps running now."""
    done = slurm(cluster, "scontrol", "show", "step", "-o", str(job_id), check=False)
    steps = []
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        r = key_values(line)
        if "StepId" in r:
            steps.append(StepInfo(r["StepId"], r.get("NodeList", ""),
                                  int(r.get("Tasks", "0") or 0), r.get("State", "")))
    return steps


def _seconds(clock: str) -> float:
    """Slurm's [days-]hh:mm:ss as seconds."""
    days, _, rest = clock.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (float(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def _path(value: str | None) -> Path | None:
    """A path field of scontrol, or None when unset."""
    return Path(value) if value and value != "(null)" else None


def _job_state(r: dict[str, str]) -> JobState:
    """One record of `scontrol show job -o` as a JobState."""
    code, _, sig = r.get("ExitCode", "").partition(":")
    task = r.get("ArrayTaskId", "")
    return JobState(
        job_id=int(r["JobId"]), state=r.get("JobState", "UNKNOWN").split()[0],
        exit_code=int(code) if code.isdigit() else None, signal=int(sig) if sig.isdigit() else 0,
        reason=r.get("Reason", ""), nodes=r.get("NodeList", ""),
        batch_host=r.get("BatchHost", ""), restarts=int(r.get("Restarts", "0") or 0),
        run_time_s=_seconds(r.get("RunTime", "0:0:0") or "0:0:0"),
        stdout=_path(r.get("StdOut")), stderr=_path(r.get("StdErr")),
        array_task_id=int(task) if task.isdigit() else None)


def _combine(states: list[JobState], steps: dict[str, StepInfo], job_id: int | str
             ) -> JobState:
    """One JobState for a plain job (with its steps), or the array's with its tasks."""
    if len(states) == 1 and states[0].array_task_id is None:
        return replace(states[0], steps=tuple(steps.values()))
    tasks = tuple(sorted(states, key=lambda s: s.array_task_id or 0))
    worst = next((t for t in tasks if not t.ok), tasks[0])
    return replace(worst, job_id=int(str(job_id).split("_")[0]), array_task_id=None,
                   tasks=tasks)


def _lost(job_id: int | str, seen: list[JobState]) -> JobState:
    """What is known of a job slurmctld forgot: the last state seen, now LOST."""
    if not seen:
        return JobState(job_id=int(str(job_id).split("_")[0]), state="LOST", exit_code=None)
    return replace(_combine(seen, {}, job_id), state="LOST")


