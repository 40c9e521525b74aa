"""scripts/record_gpu.py: refuses without CUDA; on a GPU its parts run and are recorded."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from benchmarks.goals import stamp
from dpsim.sim.hardware import get_device

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "record_gpu.py"
NO_GPU = "needs a CUDA GPU"


def _script() -> ModuleType:
    return importlib.import_module("scripts.record_gpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU machine")
def test_refuses_without_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _script().main(["--out", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_every_part_is_named_in_the_docstring() -> None:
    module = _script()
    assert set(module.PARTS) == {"chapter1_memory", "gpt2_small_bf16_step", "bf16_matmul",
                                 "ddp_nccl_world_size_1", "fsdp2_nccl_world_size_1",
                                 "nccl_two_ranks_one_gpu", "dataparallel_device_ids_0",
                                 "fp16_grad_scaler"}
    assert module.__doc__ is not None
    assert "benchmarks/results/gpu_" in module.__doc__


COMPARISON = {"measured", "predicted", "unit", "error", "error_kind", "goal", "goal_met"}
CHECK = {"observed", "expected", "goal_met"}


def assert_schema(result: dict[str, Any], measured: bool) -> None:
    """Every number beside its prediction, error and goal; every outcome beside what was
    expected; the benchmarks' goals (tests/house/test_benchmark_results.py's rules)."""
    assert result["benchmark"] == "gpu"
    assert {"gpu", "driver", "cuda", "nccl", "torch", "python", "date"} <= set(
        result["machine"])
    for name, part in result["parts"].items():
        assert part["status"] in ("measured", "predicted only", "error"), name
        if part["status"] == "error":
            assert part["error"], name
            continue
        assert part.get("comparisons") or part.get("checks"), name
        for label, c in (part.get("comparisons") or {}).items():
            assert set(c) == COMPARISON, (name, label)
            assert isinstance(c["predicted"], int | float), (name, label)
            assert c["goal"] >= 0, (name, label)
            assert (c["measured"] is not None) == measured, (name, label)
            if measured:
                assert c["goal_met"] == (c["error"] <= c["goal"]), (name, label)
            else:
                assert c["error"] is None, (name, label)
                assert c["goal_met"] is None, (name, label)
        for label, c in (part.get("checks") or {}).items():
            assert set(c) == CHECK, (name, label)
    goals = result["goals"]
    assert goals
    assert result["goal_met"] == all(g["goal_met"] for g in goals)
    assert stamp(json.loads(json.dumps(result)), "gpu")["goals"] == goals


def test_dry_run_predicts_every_part_for_the_preset(tmp_path: Path) -> None:
    module = _script()
    preset = get_device("h200")
    path = module.record(tmp_path, module.Context(preset, gpu=False))
    assert path.name == "gpu_dry_run.json"
    result = json.loads(path.read_text())
    assert result["preset"] == preset.name
    assert set(result["parts"]) == set(module.PARTS)
    assert all(p["status"] == "predicted only" and "no CUDA GPU" in p["skipped"]
               for p in result["parts"].values()), result["parts"]
    assert_schema(result, measured=False)
    matmul = result["parts"]["bf16_matmul"]["comparisons"]["bf16_matmul_tflops"]
    assert matmul["predicted"] == pytest.approx(preset.bf16_tflops * preset.efficiency,
                                                rel=0.01)
    assert [g["goal"] for g in result["goals"]] == [
        "every GPU part measured without an error"]
    assert result["goals"][0]["value"] == len(module.PARTS)


def test_a_measured_record_gets_a_goal_per_number_and_outcome(tmp_path: Path) -> None:
    """A synthetic record, as a GPU run writes it: measured values filled in by hand."""
    module = _script()
    ctx = module.Context(get_device("h100-80gb"), gpu=False)
    parts = module.run_parts(ctx, module.PARTS)
    numbers = outcomes = 0
    for part in parts.values():
        part["status"] = "measured"
        for label, c in (part.get("comparisons") or {}).items():
            part["comparisons"][label] = module.compare(
                c["predicted"] * 1.1 if c["error_kind"] == "relative" else 0.0,
                c["predicted"], c["unit"], c["goal"], c["error_kind"])
            numbers += 1
        for label, c in (part.get("checks") or {}).items():
            part["checks"][label] = module.check(c["expected"], c["expected"], True)
            outcomes += 1
    parts["fp16_grad_scaler"] = {"status": "error", "error": "RuntimeError: boom",
                                 "seconds": 0.1}
    result = stamp({"benchmark": "gpu", "machine": module.machine(False), "parts": parts},
                   "gpu")
    result["machine"]["gpu"] = "NVIDIA H100 80GB HBM3"
    assert_schema(result, measured=True)
    goals = {g["goal"]: g for g in result["goals"]}
    memory = goals["GPU chapter1_memory: peak_allocated_bytes within 0.05 fraction of the "
                   "prediction"]
    assert memory["value"] == pytest.approx(1 / 11)
    assert not memory["goal_met"]
    step = goals["GPU gpt2_small_bf16_step: step_s within 0.15 fraction of the prediction"]
    assert step["goal_met"]
    assert goals["every GPU part measured without an error"]["worst"]["config"] == {
        "parts": ["fp16_grad_scaler"]}
    assert len(result["goals"]) == 1 + numbers + outcomes - 3  # fp16's 3 numbers: an error


def test_the_check_steps_join_the_record(tmp_path: Path) -> None:
    module = _script()
    module.record(tmp_path, module.Context(get_device("h100-80gb"), gpu=False))
    steps = tmp_path / "steps.tsv"
    steps.write_text("record\tpassed\t0\t3\tpython scripts/record_gpu.py\n"
                     "nbval-05_ddp\ttimed_out\t124\t120\tpytest notebooks/05_ddp.ipynb\n"
                     "nbval-06_fsdp\tskipped\t\t0\tits GPU cells need a CUDA GPU\n")
    path = module.attach_steps(tmp_path, steps)
    result = json.loads(path.read_text())
    assert [s["status"] for s in result["check"]["steps"]] == ["passed", "timed_out",
                                                              "skipped"]
    assert result["check"]["steps"][2]["note"] == "its GPU cells need a CUDA GPU"
    last = result["goals"][-1]
    assert last["worst"]["config"] == {"steps": ["nbval-05_ddp"]}
    assert not last["goal_met"]
    empty = tmp_path / "empty"
    empty.mkdir()
    alone = json.loads(module.attach_steps(empty, steps).read_text())
    assert alone["parts"] == {}
    assert "wrote no record" in alone["measured"]


def test_a_dry_run_on_2_gpus_adds_the_2_gpu_parts_to_the_record(tmp_path: Path) -> None:
    module = _script()
    preset = get_device("h100-80gb")
    module.record(tmp_path, module.Context(preset, gpu=False))
    path = module.record(tmp_path, module.Context(preset, gpu=False, gpus=2))
    result = json.loads(path.read_text())
    assert list(result["parts"]) == [*module.PARTS, *module.TWO_GPU_PARTS]
    assert_schema(result, measured=False)
    for name in module.TWO_GPU_PARTS:
        part = result["parts"][name]
        assert part["prediction"] == "simulated"
        assert part["source"] == "nothing recorded: a dry run without a GPU"
        assert part["details"]["cluster"].startswith("2 x H100"), name
    dp = result["parts"]["dataparallel_2_gpus"]
    assert dp["checks"]["chunk_sizes"]["expected"] == [32, 32]


@pytest.mark.parametrize(("name", "slug"), [("NVIDIA H100 80GB HBM3", "h100"),
                                            ("NVIDIA H200", "h200"),
                                            ("NVIDIA H100 PCIe", "h100_pcie"),
                                            ("Some New GPU 9000", "some_new_gpu_9000"),
                                            (None, "dry_run")])
def test_results_file_is_named_by_the_device(name: str | None, slug: str) -> None:
    assert _script().device_slug(name) == slug


def test_comparison_errors() -> None:
    compare = _script().compare
    assert compare(100.0, 104.0, "bytes", 0.05)["goal_met"] is True
    assert compare(100.0, 106.0, "bytes", 0.05)["error"] == pytest.approx(0.06)
    assert compare(2e-5, 0.0, "absolute", 1e-4, "absolute")["goal_met"] is True
    assert compare(0, 0, "steps", 0.0, "absolute")["goal_met"] is True
    assert compare(None, 3.0, "s", 0.15)["goal_met"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_chapter1_memory_and_dataparallel_on_device_0() -> None:
    module = _script()
    ctx = module.Context(module.GPU_DEVICE(), gpu=True)
    memory = module.chapter1_memory(ctx)
    assert memory["comparisons"]["peak_allocated_bytes"]["measured"] > 0
    dp = module.dataparallel_one_gpu(ctx)
    assert "cuda:0" in dp["details"]["how"]
    assert {e["kind"] for e in dp["details"]["events"]} >= {"scatter", "forward", "loss",
                                                            "backward"}


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_record_writes_one_json_with_the_machine(tmp_path: Path) -> None:
    path = _script().record(tmp_path)
    data = json.loads(path.read_text())
    assert path.name.startswith("gpu_")
    assert data["machine"]["torch"] == torch.__version__
    assert set(data["parts"]) == set(_script().PARTS)
