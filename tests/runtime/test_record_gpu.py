"""scripts/record_gpu.py: refuses without CUDA; on a GPU its parts run and are recorded."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "record_gpu.py"
NO_GPU = "needs a CUDA GPU"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_gpu", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU machine")
def test_refuses_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["--out", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_every_part_is_named_in_the_docstring() -> None:
    module = _script()
    assert set(module.PARTS) == {"chapter1_memory", "gpt2_small_bf16_step",
                                 "ddp_fsdp_nccl_world_size_1", "nccl_two_ranks_one_gpu",
                                 "dataparallel_device_ids_0"}
    assert module.__doc__ is not None
    assert "benchmarks/results/gpu_" in module.__doc__


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_chapter1_memory_and_dataparallel_on_device_0() -> None:
    module = _script()
    memory = module.chapter1_memory()
    assert memory["measured_peak_bytes"] > 0
    dp = module.dataparallel_one_gpu()
    assert "cuda:0" in dp["how"]
    assert {e["kind"] for e in dp["events"]} >= {"scatter", "forward", "loss", "backward"}


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_record_writes_one_json_with_the_machine(tmp_path: Path) -> None:
    path = _script().record(tmp_path)
    data = json.loads(path.read_text())
    assert path.name.startswith("gpu_")
    assert data["machine"]["torch"] == torch.__version__
    assert set(data["parts"]) == set(_script().PARTS)
