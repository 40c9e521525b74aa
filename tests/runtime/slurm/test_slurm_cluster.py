"""A real Slurm cluster on this machine: it comes up with every node idle, listens on
127.0.0.1 only, is found again by a second `up`, runs a 2-node job whose ranks meet in a gloo
all_reduce across both nodes, and runs beside a second cluster of its own ports."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from dpsim.runtime import slurm
from dpsim.runtime.slurm.config import CRED_EXPIRE_S
from tests.runtime.slurm.conftest import needs_slurm

pytestmark = [pytest.mark.slow, needs_slurm]

RANK_SCRIPT = """\
import os

import torch
import torch.distributed as dist

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=world,
                        init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
print(f"rank {rank} of {world} on {os.environ['SLURMD_NODENAME']} "
      f"local rank {os.environ['SLURM_LOCALID']}: sum {total.item()}", flush=True)
dist.destroy_process_group()
"""

JOB_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=allreduce --nodes=2 --ntasks-per-node=1 --output=%j.out
# the node names do not resolve: the first node's address is its NodeAddr
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$(scontrol show node "$first" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export MASTER_PORT={port} GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1
srun --kill-on-bad-exit=1 --output={rank_log} {python} rank.py
"""


def _listen_addresses(ports: tuple[int, ...]) -> set[str]:
    """The local addresses of TCP listeners on `ports` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, port = local.split(":")
            if state == "0A" and int(port, 16) in ports:
                found.add(addr)
    return found


def test_up_brings_every_node_idle_on_loopback(slurm_cluster: slurm.Cluster) -> None:
    now = slurm.status(slurm_cluster.root)
    assert now is not None
    assert now.healthy, now.describe()
    assert [(n.name, n.state) for n in now.nodes] == [("n1", "idle"), ("n2", "idle")]
    assert all(now.daemons.values())
    assert _listen_addresses(slurm_cluster.ports) == {"0100007F"}  # 127.0.0.1 only
    assert slurm_cluster.node_addr("n2") == "127.0.0.1"
    with pytest.raises(ValueError, match="node='n3'"):
        slurm_cluster.node_addr("n3")
    start = time.monotonic()
    assert slurm.up(slurm_cluster.root) == slurm_cluster  # already up: the same cluster
    assert time.monotonic() - start < 10
    with pytest.raises(RuntimeError, match="cluster down"):
        slurm.up(slurm_cluster.root, nodes=3)


def test_two_node_job_all_reduces_across_both_nodes(slurm_cluster: slurm.Cluster,
                                                    tmp_path: Path) -> None:
    from dpsim.runtime.launch.ports import free_port

    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    (tmp_path / "job.sh").write_text(JOB_SCRIPT.format(
        port=free_port(), rank_log=slurm.RANK_LOG, python=sys.executable))
    job_id = slurm.submit(slurm_cluster, tmp_path / "job.sh", cwd=tmp_path)
    state = slurm.wait(slurm_cluster, job_id, timeout_s=180)
    logs = slurm.rank_logs(tmp_path, job_id)
    assert state.ok, (state, slurm.job_log(state), logs)
    assert (state.nodes, state.batch_host) == ("n[1-2]", "n1")
    assert ("0", "n[1-2]", 2) in {(s.step_id.split(".")[1], s.nodes, s.tasks) for s in state.steps}
    assert logs == {0: "rank 0 of 2 on n1 local rank 0: sum 3.0\n",
                    1: "rank 1 of 2 on n2 local rank 0: sum 3.0\n"}


def test_a_failing_job_reports_its_exit_code(slurm_cluster: slurm.Cluster,
                                             tmp_path: Path) -> None:
    (tmp_path / "fail.sh").write_text("#!/bin/bash\n#SBATCH --output=%j.out\n"
                                      "echo about to fail\nexit 3\n")
    state = slurm.wait(slurm_cluster, slurm.submit(slurm_cluster, tmp_path / "fail.sh",
                                                   cwd=tmp_path), timeout_s=60)
    assert (state.state, state.exit_code, state.ok) == ("FAILED", 3, False)
    assert slurm.job_log(state) == "about to fail\n"


def test_a_job_array_reports_each_task(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    (tmp_path / "array.sh").write_text(
        "#!/bin/bash\n#SBATCH --array=0-2 --output=%A_%a.out\n"
        "echo task $SLURM_ARRAY_TASK_ID\n[ $SLURM_ARRAY_TASK_ID != 1 ]\n")
    job_id = slurm.submit(slurm_cluster, tmp_path / "array.sh", cwd=tmp_path)
    state = slurm.wait(slurm_cluster, job_id, timeout_s=60)
    assert (state.job_id, state.ok) == (job_id, False)
    assert [(t.array_task_id, t.state, t.exit_code) for t in state.tasks] == [
        (0, "COMPLETED", 0), (1, "FAILED", 1), (2, "COMPLETED", 0)]
    assert [slurm.job_log(t) for t in state.tasks] == ["task 0\n", "task 1\n", "task 2\n"]


def test_a_requeued_job_runs_again_and_appends_to_its_log(slurm_cluster: slurm.Cluster,
                                                          tmp_path: Path) -> None:
    (tmp_path / "again.sh").write_text(
        "#!/bin/bash\n#SBATCH --output=%j.out\n"
        "echo run $SLURM_RESTART_COUNT\n"
        "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then sleep 60; fi\n")
    job_id = slurm.submit(slurm_cluster, tmp_path / "again.sh", cwd=tmp_path, requeue=True)
    log = tmp_path / f"{job_id}.out"
    deadline = time.monotonic() + 60
    while "run" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.2)
    requeued = time.monotonic()
    slurm.requeue(slurm_cluster, job_id)
    state = slurm.wait(slurm_cluster, job_id, timeout_s=120)
    assert (state.ok, state.restarts) == (True, 1), state
    assert time.monotonic() - requeued > CRED_EXPIRE_S  # Slurm holds it cred_expire + 1 s
    first, *notice, second = log.read_text().splitlines()  # appended, not truncated
    assert (first, second) == ("run", "run 1")
    assert notice == [line for line in notice if "DUE TO JOB REQUEUE" in line]


def test_two_clusters_run_side_by_side(slurm_cluster: slurm.Cluster, tmp_path: Path) -> None:
    other_root = tmp_path / "other"
    other = slurm.up(other_root, nodes=1, cpus_per_node=1)
    try:
        assert not set(other.ports) & set(slurm_cluster.ports)
        for cluster in (slurm_cluster, other):
            folder = tmp_path / cluster.root.name
            folder.mkdir(exist_ok=True)
            (folder / "hello.sh").write_text("#!/bin/bash\n#SBATCH --output=%j.out\n"
                                             "echo $SLURM_CLUSTER_NAME $SLURMD_NODENAME\n")
            state = slurm.wait(cluster, slurm.submit(cluster, folder / "hello.sh", cwd=folder),
                               timeout_s=60)
            assert state.ok, state
            assert slurm.job_log(state) == f"dpsim{cluster.ctld_port} n1\n"
    finally:
        slurm.down(other_root)
    assert slurm.status(other_root) is None
    again = slurm.status(slurm_cluster.root)
    assert again is not None
    assert again.healthy  # the other's down left this one running


def test_a_killed_node_fails_its_job_which_is_requeued_and_up_brings_it_back(
        tmp_path: Path) -> None:
    """A node's power cut (its slurmd and its job processes killed): slurmctld marks it DOWN,
    the job ends NODE_FAIL and, submitted with --requeue, waits; `up` starts the node
    again and the job runs to the end on both nodes."""
    cluster = slurm.up(tmp_path / "cluster")
    try:
        work = tmp_path / "job"
        work.mkdir()
        (work / "job.sh").write_text(
            "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1 --output=%j.out\n"
            "echo start $SLURM_RESTART_COUNT\n"
            "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then\n"
            "  srun bash -c 'touch on-$SLURMD_NODENAME; exec sleep 120'\n"
            "else srun true; fi\n")
        job_id = slurm.submit(cluster, work / "job.sh", cwd=work, requeue=True)
        deadline = time.monotonic() + 60
        while not (work / "on-n2").exists():
            assert time.monotonic() < deadline, "the job's task on n2 did not start"
            time.sleep(0.2)
        start = time.monotonic()
        killed = slurm.kill_node(cluster, "n2")
        assert len(killed) >= 3  # slurmd, the step's slurmstepd on n2, its task
        while _node_state(cluster, "n2") not in ("down", "down*"):
            assert time.monotonic() - start < 60, _node_state(cluster, "n2")
            time.sleep(0.5)
        down_s = time.monotonic() - start
        assert slurm.up(cluster.root) == cluster  # n2's slurmd again, the rest untouched
        state = slurm.wait(cluster, job_id, timeout_s=120)
        assert (state.ok, state.restarts, state.nodes) == (True, 1, "n[1-2]"), state
        log = slurm.job_log(state)
        assert "start\n" in log
        assert "start 1\n" in log
        assert "NODE FAILURE" in log
        print(f"measured: n2 DOWN {down_s:.1f} s after its power cut; "
              f"the requeued job done {time.monotonic() - start:.1f} s after it")
    finally:
        slurm.down(cluster.root)


def _node_state(cluster: slurm.Cluster, node: str) -> str:
    """sinfo's state of `node`."""
    now = slurm.status(cluster.root)
    assert now is not None
    return next((n.state for n in now.nodes if n.name == node), "")
