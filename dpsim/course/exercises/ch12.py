"""Chapter 12 exercises: a rank's environment from Slurm's, and where a requeued job resumes.

12.1: `srun` starts every rank itself and sets SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS,
... (Slurm's srun man page, OUTPUT ENVIRONMENT VARIABLES); `init_process_group("env://")`
reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and scripts read LOCAL_RANK and
LOCAL_WORLD_SIZE as torchrun sets them. The right answer is the mapping the chapter's job
script makes in bash.

12.2: a requeued job starts its script again from the top; it must find the newest
*complete* DCP checkpoint. `torch.distributed.checkpoint`'s FileSystemWriter writes every
rank's `__<rank>_0.distcp` first and renames `.metadata.tmp` to `.metadata` last
(`FileSystemWriter.finish`), so a folder without `.metadata` is a save the failure cut short.
Arguments and answers are plain data.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from dpsim.course.grading.registry import Case, exercise

# --- 12.1 a rank's environment from Slurm's -------------------------------------------------


def slurm_task_env(nodes: int, tasks_per_node: int, proc_id: int, job_id: int) -> dict[str, str]:
    """The SLURM_* variables `srun` gives task `proc_id` of a job of `nodes` nodes with
    `tasks_per_node` tasks each (block distribution: a node's tasks are consecutive)."""
    node, local = divmod(proc_id, tasks_per_node)
    return {
        "SLURM_JOB_ID": str(job_id), "SLURM_JOB_NAME": "train", "SLURM_STEP_ID": "0",
        "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes),
        "SLURM_JOB_NODELIST": f"n[1-{nodes}]" if nodes > 1 else "n1",
        "SLURM_NTASKS": str(nodes * tasks_per_node), "SLURM_NPROCS": str(nodes * tasks_per_node),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})" if nodes > 1
        else str(tasks_per_node),
        "SLURM_PROCID": str(proc_id), "SLURM_LOCALID": str(local), "SLURM_NODEID": str(node),
        "SLURMD_NODENAME": f"n{node + 1}", "SLURM_CPUS_ON_NODE": str(tasks_per_node),
    }


def torch_env(slurm: dict[str, str], head_addr: str, port: int) -> dict[str, str]:
    """The right answer: torch's variables for this task (all strings)."""
    return {"RANK": slurm["SLURM_PROCID"], "LOCAL_RANK": slurm["SLURM_LOCALID"],
            "WORLD_SIZE": slurm["SLURM_NTASKS"],
            "LOCAL_WORLD_SIZE": slurm["SLURM_NTASKS_PER_NODE"],
            "MASTER_ADDR": head_addr, "MASTER_PORT": str(port)}


@exercise("12.1", function="rank_env",
          title="Map the environment srun gives a task to the one torch.distributed reads",
          points=2)
def _rank_env_cases(rng: random.Random) -> Iterator[Case]:
    layouts = [(2, 1, 1), (2, 4, 5), (4, 8, 17), (1, 2, 1),
               (rng.randint(3, 6), 4, rng.randint(5, 11))]
    for nodes, per_node, proc in layouts:
        job_id = rng.randint(100, 99999)
        head, port = f"10.0.0.{rng.randint(2, 250)}", rng.randint(20000, 40000)
        slurm = slurm_task_env(nodes, per_node, proc, job_id)
        right = torch_env(slurm, head, port)
        node = slurm["SLURM_NODEID"]
        yield Case(f"task SLURM_PROCID={proc} of {nodes} node(s) x {per_node} task(s), "
                   f"head_addr={head!r}, port={port}", args=(slurm, head, port),
                   expected=right, mistakes={
                       "RANK is the task's rank in the whole job (SLURM_PROCID), not its "
                       "node's number (SLURM_NODEID)": {**right, "RANK": node},
                       "LOCAL_RANK is the task's rank on its node (SLURM_LOCALID), not its "
                       "rank in the job": {**right, "LOCAL_RANK": slurm["SLURM_PROCID"]},
                       "WORLD_SIZE counts tasks (SLURM_NTASKS), not nodes": {
                           **right, "WORLD_SIZE": slurm["SLURM_NNODES"]},
                       "LOCAL_WORLD_SIZE counts the tasks on one node "
                       "(SLURM_NTASKS_PER_NODE), not all of them": {
                           **right, "LOCAL_WORLD_SIZE": slurm["SLURM_NTASKS"]},
                       "an environment holds strings: os.environ refuses an int, so give "
                       "'4', not 4": {k: int(v) if v.isdigit() else v for k, v in right.items()},
                       "MASTER_PORT is a port number as a string (str(port))": {
                           **right, "MASTER_PORT": port},
                   })


# --- 12.2 where a requeued job resumes -------------------------------------------------------


def resume_step(listing: dict[str, list[str]]) -> int:
    """The right answer: the largest N of a complete `step_N` folder, 0 when there is none."""
    done = [int(name[5:]) for name, files in listing.items()
            if name.startswith("step_") and name[5:].isdigit() and ".metadata" in files]
    return max(done, default=0)


def _shards(world: int) -> list[str]:
    return [f"__{r}_0.distcp" for r in range(world)]


def _listings(rng: random.Random) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """(what happened, the checkpoint folder's listing) for jobs stopped at various points."""
    full = [*_shards(2), ".metadata"]
    every = rng.choice([2, 3, 4])
    done = [9 - every, 9, 9 + every, 9 + 2 * every]  # four saves, crossing 9 -> 1x
    yield "a first start: no checkpoint yet", {}
    yield (f"complete saves at steps {done}", {f"step_{n}": list(full) for n in done})
    cut = done[-1] + every
    yield (f"complete saves at steps {done}; the save at {cut} was cut short (its shards, no "
           ".metadata, .metadata.tmp left)",
           {**{f"step_{n}": list(full) for n in done},
            f"step_{cut}": [*_shards(2), ".metadata.tmp"]})
    yield ("complete saves at steps 8 and 9, a save at 10 cut short after one shard, and the "
           "job's log file", {"step_8": list(full), "step_9": list(full),
                              "step_10": ["__0_0.distcp"], "train.log": []})
    yield ("a save at step 5 cut short: nothing complete", {"step_5": _shards(2)})


@exercise("12.2", function="resume_step",
          title="The step a requeued job resumes from: its newest complete DCP checkpoint",
          points=2)
def _resume_cases(rng: random.Random) -> Iterator[Case]:
    for words, listing in _listings(rng):
        right = resume_step(listing)
        steps = [n for n in listing if n.startswith("step_")]
        started = [int(n[5:]) for n in steps]
        complete = [n for n, f in listing.items() if n.startswith("step_") and ".metadata" in f]
        by_name = max(complete, default=None)  # "step_9" > "step_11" as strings
        yield Case(f"{words}: listing={listing}", args=({k: list(v) for k, v in
                                                         listing.items()},),
                   expected=right, mistakes={
                       "a save cut short has no .metadata (DCP renames .metadata.tmp to "
                       ".metadata last); resume only from a folder that has it":
                           max(started, default=0),
                       "compare step numbers as numbers: 'step_11' < 'step_9' as strings":
                           int(by_name[5:]) if by_name else 0,
                       "resume from the newest complete checkpoint, not the oldest":
                           min((int(n[5:]) for n, f in listing.items()
                                if n.startswith("step_") and ".metadata" in f), default=0),
                       "the step is the number after step_, as an int": str(right),
                   })
