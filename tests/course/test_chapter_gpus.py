"""The doctor's GPU requirement of each chapter is what its notebook's real runs need.

For every chapter the test reads the notebook's calls (the world size it launches, the
devices it asks DataParallel for), then asks the runtime's own rules (`choose_backend`,
`dp_real.real_device_ids`, `resolve_device`) on a machine faked to have 0..16 GPUs which is
the fewest at which the notebook takes its GPU path. That number must be the catalogue's
`gpus_for_real`, and the doctor's plan must say the GPU path exactly from there on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from dpsim.course.chapters import CHAPTERS, Chapter, plan
from dpsim.labs.ch03_data_parallel.dp_real import real_device_ids
from dpsim.runtime.device import resolve_device
from dpsim.runtime.launch import choose_backend

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
MAX_GPUS = 16


def _code(notebook: str) -> str:
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _ints(pattern: str, code: str) -> list[int]:
    found = [int(m) for m in re.findall(pattern, code)]
    assert found, f"the notebook no longer matches {pattern!r}: update this test's reader"
    return found


def _nccl_for(world_sizes: list[int]) -> Callable[[int], bool]:
    """The launches run on NCCL with `gpus` GPUs (backend "auto", launch's default)."""
    return lambda _gpus: any(choose_backend("auto", w) == "nccl" for w in world_sizes)


def _single_device(code: str) -> Callable[[int], bool]:
    calls = re.findall(r"\btrain\(.*", code)
    assert calls, "the notebook no longer calls train(): update this test's reader"
    assert not any("device=" in c for c in calls), "train() now names a device"
    return lambda _gpus: resolve_device("auto")[0].type == "cuda"


def _data_parallel(code: str) -> Callable[[int], bool]:
    sizes = _ints(r"run_step\([^)]*n_devices=(\d+)", code)
    return lambda gpus: any(real_device_ids(n, gpus) for n in sizes)


def _cpu_launches(code: str) -> Callable[[int], bool]:
    """Every launch names device="cpu" (CPU tensors: gloo whatever the GPUs)."""
    launches = len(re.findall(r"\blaunch\(", code))
    assert launches, "the notebook no longer launches: update this test's reader"
    on_cpu = re.findall(r"\blaunch\([^()]*(?:\([^()]*\)[^()]*)*device=\"cpu\"", code)
    assert len(on_cpu) == launches, "a launch without device=\"cpu\": update this test's reader"
    return lambda _gpus: False


def _no_gpu_path(code: str) -> Callable[[int], bool]:
    launches = re.findall(r"\b(run_ddp|run_fsdp\w*|run_step|launch)\(", code)
    assert not launches, f"a chapter without a GPU path launches {launches}"
    return lambda _gpus: False


def probe(chapter: Chapter) -> Callable[[int], bool]:
    """Whether the chapter's notebook takes its GPU path on a machine with `gpus` GPUs."""
    code = _code(chapter.notebook)
    if chapter.number == 1:
        return _single_device(code)
    if chapter.number == 3:
        return _data_parallel(code)
    if chapter.number in (2, 7, 13):  # 7: DDP and FSDP2 model states on gloo; 13: gloo
        return _cpu_launches(code)
    if chapter.number == 5:
        return _nccl_for(_ints(r"WORLD_SIZE = (\d+)", code))
    if chapter.number == 6:
        return _nccl_for(_ints(r"launch\(train_fsdp, world_size=(\d+)", code))
    if chapter.number == 8:  # gloo ranks, plus claim 17's two NCCL ranks on one GPU
        assert "Lab(" in code
        from dpsim.labs.ch08_myths.myths_lab import nccl_two_ranks_one_gpu  # the GPU run it adds

        assert callable(nccl_two_ranks_one_gpu)
        return lambda gpus: gpus >= 1 and dist.is_nccl_available()
    if chapter.number == 9:  # autocast fp16 with a GradScaler on the GPU, when there is one
        assert re.search(r'torch\.cuda\.is_available\(\)', code), "update this test's reader"
        return lambda gpus: gpus >= 1
    if chapter.number == 10:  # the lab's launches name backend="gloo", the notebook's "cpu"
        from dpsim.labs.ch10_failures import checkpoint_ddp, dcp_reshard, hsdp_train

        for module in (checkpoint_ddp, dcp_reshard, hsdp_train):
            source = Path(module.__file__ or "").read_text()
            assert 'backend="gloo"' in source, module.__name__
        return _cpu_launches(code)
    return _no_gpu_path(code)


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Make torch report `n` CUDA GPUs (and NCCL) to the runtime's rules."""
    count = [0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count[0] > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count[0])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "fake GPU")
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)

    def set_count(n: int) -> None:
        count[0] = n

    return set_count


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.notebook)
def test_doctor_and_notebook_agree_on_gpus(chapter: Chapter,
                                           fake_gpus: Callable[[int], None]) -> None:
    runs_on_gpu = probe(chapter)
    path = []
    for gpus in range(MAX_GPUS + 1):
        fake_gpus(gpus)
        path.append(runs_on_gpu(gpus))
    fewest = path.index(True) if True in path else 0
    assert path == [fewest > 0 and g >= fewest for g in range(MAX_GPUS + 1)]
    assert chapter.gpus_for_real == fewest, (
        f"{chapter.notebook}: the doctor says {chapter.gpus_for_real} GPUs, the notebook's "
        f"GPU path starts at {fewest}")
    if fewest == 0:
        assert chapter.real_gpu == chapter.real_cpu  # nothing more is claimed with GPUs
    for gpus in range(MAX_GPUS + 1):
        row = next(r for r in plan(gpus, nccl=True) if r["notebook"] == chapter.notebook)
        assert (row["real here"] == chapter.real_gpu) == (path[gpus] or fewest == 0)


def test_dataparallel_runs_for_real_from_two_gpus() -> None:
    assert real_device_ids(4, 0) == []
    assert real_device_ids(4, 1) == []
    assert real_device_ids(4, 2) == [0, 1]
    assert real_device_ids(4, 8) == [0, 1, 2, 3]
    assert real_device_ids(4, 1, force=True) == [0]
    with pytest.raises(ValueError, match="n_devices=0"):
        real_device_ids(0, 2)
