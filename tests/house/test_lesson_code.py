"""The lesson's code is in view, in lean text.

`API_IN_VIEW`: the torch calls a chapter teaches appear in its own code cells (not only
in markdown or behind a dpsim helper). `LEAN`: the chapters whose prose is at most
`MAX_CHAPTER_WORDS` markdown words, none of their markdown cells over `MAX_CELL_WORDS`.
A chapter enters both tables when its notebook is rewritten that way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
MAX_CHAPTER_WORDS = 1500
MAX_CELL_WORDS = 200

# chapter file stem -> strings that must appear in its code cells
API_IN_VIEW: dict[str, list[str]] = {
    # chapters 01-03
    "01_single_device": ["backward()", ".step()", "zero_grad", "saved_tensors(",
                         "model_state_breakdown(", "torch.autocast", "use_reentrant=False"],
    "02_collectives": ["dist.all_reduce", "all_gather", "reduce_scatter", "dist.broadcast",
                       "isend", "irecv", "all_gather_into_tensor", "reduce_scatter_tensor",
                       "async_op=True", ".wait()", "torch.cuda.Event"],
    "03_data_parallel": ["DataParallel", "device_ids", "output_device", "scatter", "replicate",
                         "parallel_apply", "gather"],

    # chapters 05-06
    "05_ddp": ["init_process_group", "DistributedSampler", "set_epoch", "DistributedDataParallel",
               "no_sync", "register_comm_hook", "static_graph", "torchrun", "init_method=",
               "register_post_accumulate_grad_hook", "async_op=True", ".wait()",
               "use_reentrant=True"],
    "06_fsdp": ["init_device_mesh", "fully_shard", "reshard_after_forward", "to_local",
                "full_tensor", "set_requires_gradient_sync"],

    # chapter 07: the planner's numbers next to the torch calls they stand for
    "07_choosing_a_strategy": ["DistributedDataParallel", "bucket_cap_mb", "init_device_mesh",
                               "fully_shard", "reshard_after_forward", "PRECISION_SETTINGS"],

    # chapters 09-10
    "09_precision_and_memory": ["torch.autocast", "MixedPrecisionPolicy", "checkpoint",
                                "clip_grad_norm_", "to_empty"],
    "10_checkpoints_and_failures": ["dcp.save", "dcp.load", "init_device_mesh",
                                    "--max-restarts", "Join"],

    # chapter 12: the job scripts are in view
    "12_on_a_cluster": ["#SBATCH --nodes", "--ntasks-per-node", "srun --kill-on-bad-exit",
                        "torchrun --nnodes", "--rdzv-backend=c10d", "--rdzv-id",
                        "SLURM_PROCID", "--requeue", "--open-mode=append", "dcp.save",
                        "dcp.load", "fully_shard"],

    # chapter 13
    "13_training_at_scale_correctly": ["DistributedSampler", "set_epoch", "LinearLR",
                                       "dist.all_reduce", "ignore_index", 'reduction="sum"',
                                       "model.module", "get_rng_state", "set_rng_state",
                                       "np.random.get_state", "random.getstate",
                                       "generator=torch.Generator()"],

}

# chapter file stems whose prose is lean
LEAN: list[str] = [
    # chapters 01-03
    "01_single_device",
    "02_collectives",
    "03_data_parallel",

    # chapters 05-06
    "05_ddp",
    "06_fsdp",

    # chapters 00 and 04
    "00_start_here",
    "04_gil",

    # chapters 07-11
    "07_choosing_a_strategy",
    "08_myths_lab",
    "09_precision_and_memory",
    "10_checkpoints_and_failures",
    "11_how_far_to_trust_dpsim",
    "12_on_a_cluster",

    # chapter 13
    "13_training_at_scale_correctly",

]


def _cells(stem: str, kind: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def _words(text: str) -> int:
    return len(re.findall(r"[A-Za-z0-9_']+", text))


@pytest.mark.parametrize("stem", sorted(API_IN_VIEW))
def test_the_lesson_calls_torch_in_its_own_cells(stem: str) -> None:
    code = "\n".join(_cells(stem, "code"))
    missing = [api for api in API_IN_VIEW[stem] if api not in code]
    assert not missing, f"{stem}: not in any code cell: {missing}"


@pytest.mark.parametrize("stem", sorted(LEAN))
def test_the_prose_is_lean(stem: str) -> None:
    cells = _cells(stem, "markdown")
    total = sum(_words(c) for c in cells)
    assert total <= MAX_CHAPTER_WORDS, f"{stem}: {total} words of prose"
    long = [(_words(c), c[:60]) for c in cells if _words(c) > MAX_CELL_WORDS]
    assert not long, f"{stem}: markdown cells over {MAX_CELL_WORDS} words: {long}"


def test_no_notebook_imports_a_private_name() -> None:
    pattern = re.compile(r"^\s*from\s+\S+\s+import\s+.*\b_[A-Za-z]|^\s*import\s+\S*\._",
                         re.MULTILINE)
    found = {}
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        hits = [m.group(0).strip() for c in _cells(path.stem, "code")
                for m in pattern.finditer(c)]
        if hits:
            found[path.name] = hits
    assert not found, found
