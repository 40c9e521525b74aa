"""pyproject's torch floor is the oldest release the kit was seen to work with.

`REQUIRES` records, for what the kit needs from torch, the oldest release in which it was
seen to work and how that was checked (the fast suite and the real DP, DDP, FSDP2 and
torchrun runs were run here on torch 2.6.0, 2.8.0, 2.9.1 and 2.10.0, the real runs on
2.7.1; the 2.5.1 wheel was read). The tests check that the floor in pyproject.toml is
not below any of them, that every torch import in dpsim/ and scripts/ is recorded (a new
one must be checked on the floor before it is added), and that each recorded name exists
in the torch installed here. `make test-floor` runs the suite on the floor release itself.
"""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEEN = "present in 2.6.0, 2.8.0, 2.9.1, 2.10.0 (fast suite and real runs ran here)"
# chapters 9 and 10 and the newer exercises: their names were read in the sources of the
# torch 2.9.1 wheel (macOS arm64, same Python files); their real runs ran on 2.13.0 only
READ_29 = "named in the torch 2.9.1 wheel's sources (read, not run there); runs on 2.13.0"
RUN_213 = "public torch API; run on 2.13.0 only, not yet on the floor (make test-floor)"

# name -> (oldest release seen to work, how it was seen)
REQUIRES: dict[str, tuple[str, str]] = {
    "torch.distributed.fsdp.fully_shard": (
        "2.6", "absent from torch/distributed/fsdp/__init__.py of the 2.5.1 wheel (there only "
               "as torch.distributed._composable.fsdp); present from 2.6.0"),
    "FSDP2 on gloo (CPU) trains as one process does, to 1e-5 (chapter 6)": (
        "2.9", "2.6.0: every CPU FSDP2 run fails ('Stream' object has no attribute "
               "'record_event'); 2.7.1 and 2.8.0: runs, but parameters differ from one "
               "process by up to 2.2e-4 (tests/runtime/test_fsdp_run.py); 2.9.1 and 2.10.0: pass"),
    "torch.distributed.device_mesh.init_device_mesh": ("2.6", SEEN),
    # chapter 2's harness wraps their methods (send, recv, allreduce ..., Work.wait)
    "torch.distributed.ProcessGroup": (
        "2.9", "re-exported by torch/distributed/__init__.py from torch._C._distributed_c10d; "
               "run on 2.13.0 only, not yet on the floor (make test-floor)"),
    "torch.distributed.Work": (
        "2.9", "re-exported by torch/distributed/__init__.py from torch._C._distributed_c10d; "
               "run on 2.13.0 only, not yet on the floor (make test-floor)"),
    "torch.utils.flop_counter.FlopCounterMode": ("2.6", SEEN),
    # chapter 2's ranks notice functional collectives with a dispatch mode
    "torch.utils._python_dispatch.TorchDispatchMode": (
        "2.6", "FlopCounterMode's base class (seen on 2.6); its use in chapter 2's harness "
               "run on 2.13.0 only (make test-floor)"),
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook": ("2.6", SEEN),
    "torch.nn.parallel.DistributedDataParallel": ("2.6", SEEN),
    "torch.nn.parallel.data_parallel": ("2.6", SEEN),
    "torch.nn.parallel.distributed": ("2.6", SEEN),
    "torch.nn.parallel.parallel_apply": ("2.6", SEEN),
    "torch.nn.parallel.comm": ("2.6", SEEN),
    "torch.nn.parallel.scatter_gather.scatter_kwargs": ("2.6", SEEN),
    "torch.nn.Module._replicate_for_data_parallel": ("2.6", SEEN),
    "torch.distributed.GradBucket": ("2.6", SEEN),
    "torch.distributed._compute_bucket_assignment_by_size": ("2.6", SEEN),
    "torch.distributed._DEFAULT_FIRST_BUCKET_BYTES": ("2.6", SEEN),
    "torch.distributed.batch_isend_irecv": ("2.6", SEEN),
    "torch.autograd.graph.saved_tensors_hooks": ("2.6", SEEN),
    "torch.profiler.profile": ("2.6", SEEN),
    "torch.utils.data.DataLoader": ("2.6", SEEN),
    "torch.utils.data.Dataset": ("2.6", SEEN),
    "torch.utils.data.DistributedSampler": ("2.6", SEEN),
    "torch.utils.data.TensorDataset": ("2.6", SEEN),
    "torch.utils.data.distributed.DistributedSampler": ("2.6", SEEN),
    "torch.distributed": ("2.6", SEEN),
    "torch.nn": ("2.6", SEEN),
    "torch.nn.functional": ("2.6", SEEN),
    "torch": ("2.6", SEEN),
    "torch.distributed.algorithms.join.Join": ("2.9", READ_29),
    "torch.distributed.checkpoint": ("2.9", READ_29),
    "torch.distributed.checkpoint.DefaultSavePlanner": ("2.9", READ_29),
    "torch.distributed.checkpoint.metadata.TensorStorageMetadata": ("2.9", READ_29),
    "torch.distributed.checkpoint.state_dict.StateDictOptions": ("2.9", READ_29),
    "torch.distributed.checkpoint.state_dict.get_model_state_dict": ("2.9", READ_29),
    "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict": ("2.9", READ_29),
    "torch.distributed.checkpoint.state_dict.set_model_state_dict": ("2.9", READ_29),
    "torch.distributed.checkpoint.state_dict.set_optimizer_state_dict": ("2.9", READ_29),
    "torch.distributed.elastic.multiprocessing.errors.record": ("2.9", READ_29),
    "torch.distributed.fsdp.CPUOffloadPolicy": ("2.9", READ_29),
    "torch.distributed.fsdp.MixedPrecisionPolicy": ("2.9", READ_29),
    "torch.distributed.fsdp.OffloadPolicy": ("2.9", READ_29),
    "torch.distributed.optim.ZeroRedundancyOptimizer": ("2.9", READ_29),
    "torch.distributed.tensor.Shard": ("2.9", READ_29),
    "torch.distributed.tensor.distribute_tensor": ("2.9", READ_29),
    "torch.nn.parallel._functions": ("2.9", READ_29),
    "torch.profiler.ProfilerActivity": ("2.9", READ_29),
    "torch.utils.checkpoint.checkpoint": ("2.9", READ_29),
    # the checks of 6.6 (forward hook, FSDPModule) and 10.1 (save/load, both global hooks)
    "torch.distributed.fsdp.FSDPModule": ("2.9", RUN_213),
    "torch.nn.modules.module.register_module_forward_pre_hook": ("2.9", RUN_213),
    "torch.optim.optimizer.register_optimizer_step_pre_hook": ("2.9", RUN_213),
    "torch.serialization": ("2.9", RUN_213),
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [d.split(">=", 1)[1] for d in deps if d.startswith("torch>=")]
    assert len(found) == 1, f"pyproject.toml should require torch>=X once: {deps}"
    return found[0]


def torch_imports() -> set[str]:
    """Every `import torch...` and `from torch... import name` in dpsim/ and scripts/."""
    names: set[str] = set()
    for path in [*(ROOT / "dpsim").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names if a.name.split(".")[0] == "torch"}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
                names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_floor_is_the_oldest_release_seen_to_work() -> None:
    required = max(_version(since) for since, _ in REQUIRES.values())
    assert _version(floor()) == required, (
        f"pyproject says torch>={floor()}, the recorded table needs {required}")
    readme = (ROOT / "README.md").read_text()
    assert f"torch {floor()}+" in readme
    assert f"`torch>={floor()}`" in readme


def test_every_torch_import_is_recorded() -> None:
    missing = sorted(torch_imports() - set(REQUIRES))
    assert not missing, f"check these on torch {floor()} (make test-floor), then record them"


@pytest.mark.parametrize("name", [n for n in REQUIRES if n.startswith("torch")])
def test_recorded_name_exists_in_this_torch(name: str) -> None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{name} cannot be imported")
