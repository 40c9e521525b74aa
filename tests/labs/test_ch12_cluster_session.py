"""Chapter 12's cluster session: it uses a running cluster and leaves it running, starts one
only when none runs (and stops only that), and where Slurm is missing prints each command
instead of running it. The jobs themselves run under nbval (notebooks/12_on_a_cluster)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpsim.labs.ch12_on_a_cluster import cluster_session as cs
from dpsim.runtime.slurm import Cluster

MISSING = "sbatch, slurmctld, slurmd and munged are not installed (apt-get install ...)"


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("no Slurm command may run here")


@pytest.fixture
def no_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cs, "available", lambda: MISSING)
    for name in ("up", "down", "status", "submit", "wait"):
        monkeypatch.setattr(cs, name, _refuse)


def test_without_slurm_every_command_is_printed_not_run(
        no_slurm: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = cs.open_cluster()
    assert session.cluster is None
    assert session.missing == MISSING
    assert "no Slurm here" in str(session)
    assert "print what they would run" in str(session)
    job = cs.sbatch(session, tmp_path / "job.sh", cwd=tmp_path,
                    options=["--job-name=clean", "--export=ALL,RDZV_PORT=29500"])
    assert job is None
    assert cs.wait_job(session, job) is None
    assert cs.scontrol(session, "update", "NodeName=n2", "State=DOWN", "Reason=the node died") == ""
    assert cs.wait_requeued(session, job) == ""
    assert cs.job_field(session, job, "JobState") == ""
    assert cs.close_cluster(session) == "no cluster was used"
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        f"would run: sbatch --job-name=clean --export=ALL,RDZV_PORT=29500 {tmp_path / 'job.sh'}",
        "would run: scontrol update NodeName=n2 State=DOWN 'Reason=the node died'"]


def test_a_running_cluster_is_used_and_left_running(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    cluster = Cluster(root=tmp_path, ctld_port=6817, node_ports={"n1": 6818, "n2": 6819},
                      cpus_per_node=2)
    monkeypatch.setattr(cs, "available", lambda: None)
    monkeypatch.setattr(cs, "status", lambda: SimpleNamespace(healthy=True, cluster=cluster))
    monkeypatch.setattr(cs, "up", _refuse)
    monkeypatch.setattr(cs, "down", _refuse)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # restored afterwards
    monkeypatch.setenv("SLURM_CONF", "unset")
    session = cs.open_cluster()
    assert session.cluster == cluster
    assert not session.started
    assert "already running" in str(session)
    assert "n1 at 127.0.0.1, n2 at 127.0.0.1" in str(session)
    # jobs inherit the kernel's environment: they reach this cluster and this Python's torchrun
    assert os.environ["SLURM_CONF"] == str(cluster.conf)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert cs.close_cluster(session) == "the cluster was running before the chapter: left running"


def test_a_cluster_it_starts_is_the_one_it_stops(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    cluster = Cluster(root=tmp_path, ctld_port=6817, node_ports={"n1": 6818, "n2": 6819},
                      cpus_per_node=2)
    stopped: list[Path | None] = []
    monkeypatch.setattr(cs, "available", lambda: None)
    monkeypatch.setattr(cs, "status", lambda: None)
    monkeypatch.setattr(cs, "up", lambda nodes: cluster)
    monkeypatch.setattr(cs, "down", stopped.append)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    monkeypatch.setenv("SLURM_CONF", "unset")
    session = cs.open_cluster()
    assert session.started
    assert "started now" in str(session)
    assert cs.close_cluster(session) == "the cluster the chapter started is stopped"
    assert stopped == [tmp_path]


def test_the_ddp_script_is_chapter_5s() -> None:
    assert cs.TRAIN_DDP.name == "train_ddp.py"
    assert "DistributedDataParallel" in cs.TRAIN_DDP.read_text()
