"""`python -m dpsim plan`: the prediction it prints, wrong names, and the job script it writes."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from dpsim.__main__ import main
from dpsim.course.plan_command import predict
from dpsim.runtime import slurm
from dpsim.runtime.launch.ports import free_port
from dpsim.runtime.slurm_script import JobSpec, sbatch_script
from dpsim.sim import get_cluster, get_workload, plan

TRAIN_DDP = Path(__file__).resolve().parents[2] / "scripts" / "train_ddp.py"  # chapter 5's

ISSUE_EXAMPLE = ["plan", "--model", "llama-7b", "--cluster", "dgx-h100", "--nodes", "4",
                 "--strategy", "fsdp"]


def test_prints_the_planners_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ISSUE_EXAMPLE) == 0
    out = capsys.readouterr().out
    expected = plan(get_workload("llama-7b"), get_cluster("dgx-h100"), "fsdp", 32, 32)
    assert "simulated, not measured" in out
    assert "cluster preset dgx-h100: DGX H100" in out
    assert "4 node(s) x 8 GPUs = 32 GPUs" in out
    assert f"memory per GPU: {max(expected.peak_bytes) / 1024**3:.1f} GiB of 80 GiB: fits" in out
    assert f"step time: {expected.step_s * 1e3:.1f} ms" in out
    assert f"communication per step: {expected.traffic_bytes_per_device / 1e9:.2f} GB" in out
    assert "global batch 32 (1 per GPU)" in out


def test_says_when_it_does_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama-70b", "--cluster", "dgx-h100", "--strategy", "ddp"]
                ) == 0
    assert "does NOT fit (8 of 8 GPUs)" in capsys.readouterr().out


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--model", "llama7b", "'llama-7b'"),
    ("--cluster", "dgx-h1000", "'dgx-h100'"),
    ("--strategy", "fsdp2", "'fsdp'"),
    ("--precision", "bf16", "'torch_amp'"),
    ("--nodes", "0", ">= 1 and <= 128"),
    ("--batch-per-gpu", "0", ">= 1"),
    ("--gpus-per-node", "4", "8 (dgx-h100's GPUs per node"),
])
def test_a_wrong_value_names_the_option_and_what_is_allowed(
        option: str, value: str, allowed: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = [*ISSUE_EXAMPLE, "--sbatch", str(tmp_path / "job.sh")]
    i = args.index(option) if option in args else None
    if i is None:
        args += [option, value]
    else:
        args[i + 1] = value
    assert main(args) == 2
    captured = capsys.readouterr()
    assert f"error: {option}={value!r}" in captured.err or f"{option}={value}" in captured.err
    assert "allowed" in captured.err
    assert allowed in captured.err
    assert captured.out == ""
    assert not (tmp_path / "job.sh").exists()


def test_a_strategy_of_one_node_is_refused_beyond_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--nodes", "2",
                 "--strategy", "dp"]) == 2
    assert "allowed" in capsys.readouterr().err


def test_the_script_carries_the_job_and_the_prediction(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    job = tmp_path / "job.sh"
    assert main([*ISSUE_EXAMPLE, "--sbatch", str(job), "--partition", "gpu", "--account",
                 "lab42", "--train", "train.py --steps 100"]) == 0
    printed = capsys.readouterr().out
    text = job.read_text()
    assert text.startswith("#!/bin/bash\n")
    header = [line[2:] for line in text.splitlines()
              if line.startswith("# ") and not line.startswith("#SBATCH")]
    for line in printed.splitlines()[:-1]:  # the prediction, word for word
        assert line.rstrip() in header
    assert any(line.startswith("written by: python -m dpsim plan --model llama-7b") for line
               in header)
    sbatch = re.findall(r"^#SBATCH (\S+)$", text, re.M)
    assert sbatch == ["--job-name=dpsim-llama-7b-fsdp", "--nodes=4", "--ntasks-per-node=1",
                      "--gpus-per-node=8", "--time=01:00:00", "--partition=gpu",
                      "--account=lab42", "--output=%x-%j.out"]
    # every #SBATCH line comes before the first command (sbatch stops reading there)
    first_command = next(i for i, line in enumerate(text.splitlines())
                         if line and not line.startswith("#"))
    last_sbatch = max(i for i, line in enumerate(text.splitlines())
                      if line.startswith("#SBATCH"))
    assert last_sbatch < first_command
    launch = " ".join(text.split("srun ", 1)[1].replace("\\\n", " ").split())
    assert launch == ("--kill-on-bad-exit=1 torchrun --nnodes=4 --nproc-per-node=8 "
                      '--rdzv-backend=c10d --rdzv-endpoint="$head_addr:29500" '
                      '--rdzv-id="$SLURM_JOB_ID" train.py --steps 100')
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
    assert "NCCL_SOCKET_IFNAME" in text


def test_a_cpu_job_for_a_test_cluster(tmp_path: Path) -> None:
    job = tmp_path / "job.sh"
    assert main([*ISSUE_EXAMPLE, "--sbatch", str(job), "--gpus-per-node", "0"]) == 0
    text = job.read_text()
    assert "--gpus-per-node" not in text.split("set -euo")[1]
    assert "#SBATCH --gpus-per-node" not in text
    assert "--nproc-per-node=1" in text
    assert "CPU job (gloo)" in text


def test_the_training_command_is_a_shell_line() -> None:
    """Written as given, so the job's shell expands its variables ($SCRATCH, $SLURM_JOB_ID)."""
    text = sbatch_script(JobSpec(nodes=2, nproc_per_node=8, gpus_per_node=8,
                                 train='train.py --ckpt "$SCRATCH/ckpt-$SLURM_JOB_ID"'))
    assert text.endswith('    train.py --ckpt "$SCRATCH/ckpt-$SLURM_JOB_ID"\n')


def test_the_head_nodes_address_comes_from_nodeaddr() -> None:
    """The sed in the script takes NodeAddr from `scontrol show node`'s output."""
    text = sbatch_script(JobSpec(nodes=2, nproc_per_node=1, gpus_per_node=0))
    sed = re.search(r"sed -n '([^']+)'", text)
    assert sed is not None
    pattern = sed.group(1)  # s/.*NodeAddr=\([^ ]*\).*/\1/p
    assert pattern == r"s/.*NodeAddr=\([^ ]*\).*/\1/p"
    line = "   NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8"
    assert re.sub(r".*NodeAddr=([^ ]*).*", r"\1", line) == "127.0.0.1"


@pytest.mark.parametrize(("field", "kwargs"), [
    ("nodes", {"nodes": 0}),
    ("nproc_per_node", {"nproc_per_node": 0}),
    ("gpus_per_node", {"gpus_per_node": -1}),
    ("port", {"port": 80}),
    ("train", {"train": "train.py 'unclosed"}),
    ("train", {"train": "a.py\nrm -rf x"}),
    ("partition", {"partition": "gpu; rm"}),
    ("time", {"time": "one hour"}),
])
def test_job_spec_checks_its_fields(field: str, kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"nodes": 2, "nproc_per_node": 1, "gpus_per_node": 0}
    with pytest.raises(ValueError, match=rf"^{field}=.*allowed"):
        JobSpec(**{**base, **kwargs})  # type: ignore[arg-type]


def test_predict_is_the_planners_step() -> None:
    p = predict("gpt-1.3b", "h100-ib-4", 2, "ddp", 4)
    expected = plan(get_workload("gpt-1.3b"), get_cluster("h100-ib-4"), "ddp",
                    2 * get_cluster("h100-ib-4").devices_per_node,
                    8 * get_cluster("h100-ib-4").devices_per_node)
    assert p.result == expected


# --- the written script on a real (one-machine) Slurm cluster ------------------------------

NO_SLURM = slurm.available()
needs_slurm = pytest.mark.skipif(
    NO_SLURM is not None and not os.environ.get("DPSIM_REQUIRE_SLURM"),
    reason=f"Slurm is not installed here: {NO_SLURM}")


@pytest.mark.slow  # a Slurm cluster and a 2-node torchrun job: about 20-40 s
@needs_slurm
def test_the_written_script_runs_to_completion_on_the_test_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.sh"
    assert main(["plan", "--model", "gpt2-124m", "--cluster", "dgx-h100", "--nodes", "2",
                 "--strategy", "ddp", "--gpus-per-node", "0", "--port", str(free_port()),
                 "--time", "10", "--train", f"{TRAIN_DDP} --steps 3", "--sbatch", str(job)]
                ) == 0
    capsys.readouterr()
    # the job inherits the submitter's environment (sbatch exports it): this torchrun first
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "slurm"
    cluster = slurm.up(root, nodes=2)
    try:
        job_id = slurm.submit(cluster, job, cwd=tmp_path)
        state = slurm.wait(cluster, job_id, timeout_s=240)
        log = slurm.job_log(state)
    finally:
        slurm.down(root)
    assert state.ok, (state, log[-3000:])
    assert state.nodes == "n[1-2]"
    assert "world_size 2, backend gloo" in log
    checksums = re.findall(r"rank [01]/2: final loss \S+, checksum (\S+)", log)
    assert len(checksums) == 2, log[-3000:]
    assert checksums[0] == checksums[1]  # DDP: the same parameters on both nodes
