"""scripts/gpu_check.sh --dry-run on a CPU: the steps that need no GPU run, the others are
skipped with the reason, and the results file and the log say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_STEPS = {"nbval-01_single_device", "nbval-03_data_parallel", "nbval-05_ddp",
                  "nbval-06_fsdp", "nbval-08_myths_lab", "nbval-09_precision_and_memory"}


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is for a machine without "
                    "a GPU; on a GPU the check measures (scripts/gpu_check.sh OUTDIR)")
@pytest.mark.parametrize("gpus", [1, 2])
def test_dry_run_writes_the_record_and_says_what_it_skipped(tmp_path: Path, gpus: int) -> None:
    no_bundle = tmp_path / "no-bundle"
    no_bundle.mkdir()
    # pytest -m gpu over one file: collecting the whole suite again costs CI a minute
    env = dict(os.environ, PYTHON=sys.executable, GPU_BUNDLE=str(no_bundle),
               GPU_CHECK_PYTEST_PATHS="tests/runtime/test_record_gpu.py")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run",
                           "--gpus", str(gpus), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} >= {"gpu_dry_run.json", "gpu_check.log",
                                               "pytest_gpu.xml"}
    log = (out / "gpu_check.log").read_text()
    assert "DRY RUN" in log
    assert f"{gpus} GPUs (emulated), budget {420 if gpus == 1 else 540} s" in log
    assert "=== record-2gpu (at most 120 s)" in log if gpus == 2 else (
        "skipped record-2gpu: needs 2 GPUs; this machine has 1" in log)
    assert "record_gpu: every call binds" in log
    assert "BROKEN" not in log
    assert "skipped nbval-06_fsdp: its GPU cells need a CUDA GPU" in log
    assert "skipped bundle: no wheels in" in log
    result = json.loads((out / "gpu_dry_run.json").read_text())
    steps = {s["step"]: s for s in result["check"]["steps"]}
    two = {"record-2gpu"}
    assert {n for n, s in steps.items() if s["status"] == "skipped"} == {
        "bundle", *NOTEBOOK_STEPS, *(two if gpus == 1 else ())}
    assert all(s["note"] for s in steps.values() if s["status"] == "skipped")
    assert {n for n, s in steps.items() if s["status"] == "passed"} == {
        "versions", "record", "pytest-gpu", *(two if gpus == 2 else ())}
    assert all(p["status"] == "predicted only" for p in result["parts"].values())
    assert ("ddp_nccl_world_size_2" in result["parts"]) == (gpus == 2)
    assert result["goals"][-1]["goal"].startswith("every step of the GPU check passed")
    assert result["goals"][-1]["goal_met"]
