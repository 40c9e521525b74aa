"""The GPU check's plan, proved without a GPU: every library function scripts/record_gpu.py
calls only on a GPU (on 1 and on 2 GPUs) exists and takes the arguments the part gives it;
each part uses exactly the calls its plan names; the 2-GPU step fits its time box and the
whole check fits one device command. No process is started."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = (ROOT / "scripts" / "gpu_check.sh").read_text()
COMMAND_LIMIT_S = 600  # one command on a lent GPU machine (its 15 minutes include the start)
KILL_GRACE_S = 10  # run_step's `timeout --kill-after=10`
START_ALLOWANCE_S = 40  # record_gpu.py --gpus 2 outside the launches: Python, torch, CUDA on
# two GPUs, the DataParallel step (warm-up included) and the CPU references


def _script() -> ModuleType:
    return importlib.import_module("scripts.record_gpu")


def shell_value(name: str) -> int:
    found = re.search(rf"^{name}=(\d+)", CHECK, re.MULTILINE)
    assert found, f"gpu_check.sh sets no {name}"
    return int(found.group(1))


@pytest.mark.parametrize("gpus", [1, 2])
def test_every_call_of_the_plan_binds(gpus: int) -> None:
    module = _script()
    names = [name for name, _ in module.plan(gpus)]
    one = ["record", *module.PARTS]
    assert names == (one if gpus == 1 else [*one, "record_2_gpus", *module.TWO_GPU_PARTS])
    assert module.plan_problems(gpus) == []


def test_the_2gpu_calls_run_on_two_nccl_ranks() -> None:
    module = _script()
    for call in (module.RUN_DDP_2, module.RUN_FSDP_2):
        assert call.kwargs["world_size"] == 2
        assert call.kwargs["backend"] == "nccl"
    assert module.DP_STEP_2.kwargs["n_devices"] == 2
    assert module.DP_STEP_2.kwargs["mode"] == "cuda"


def test_a_call_to_what_is_gone_or_an_argument_not_taken_is_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = _script()
    call = module.Call
    ddp = "dpsim.labs.ch05_ddp.ddp_train"
    assert "AttributeError" in call(ddp, "run_ddpp", ("cfg",)).problems()[0]
    assert "ModuleNotFoundError" in call("dpsim.labs.ch05_gone", "run_ddp").problems()[0]
    assert "timeout" in call(ddp, "run_ddp", ("cfg",), {"timeout": 40.0}).problems()[0]
    assert "missing" in call(ddp, "max_param_difference", ("a",)).problems()[0]
    # run_fsdp hands **kwargs on: what it is given there no signature checks
    loose = call("dpsim.runtime.fsdp_run", "run_fsdp", (), {"world_size": 2, "steps": 2})
    assert "through *kwargs" in loose.problems()[0]
    # and the plan's own check (the dry run's) reports it
    broken = call(ddp, "run_ddp", ("cfg",), {"world_size": 2, "backend": "nccl",
                                               "timeout": 40.0})
    monkeypatch.setitem(module.PLAN, "ddp_nccl_world_size_2", (broken,))
    assert module.plan_problems(1) == []
    assert len(module.plan_problems(2)) == 1
    assert module.print_plan(2) == 1


def calls_named_in(function: object, calls: dict[str, object]) -> set[str]:
    tree = ast.parse(inspect.getsource(function))  # type: ignore[arg-type]
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in calls}


def test_each_part_uses_exactly_the_calls_its_plan_names() -> None:
    module = _script()
    calls = {n: v for n, v in vars(module).items() if isinstance(v, module.Call)}
    name_of = {id(v): n for n, v in calls.items()}
    planned = {id(c) for cs in module.PLAN.values() for c in cs}
    assert set(map(id, calls.values())) <= planned, "a Call no plan names"
    for part, fn in {**module.PARTS, **module.TWO_GPU_PARTS}.items():
        used = calls_named_in(fn, calls)
        assert used == {name_of[id(c)] for c in module.PLAN[part]}, part
    assert calls_named_in(module.record, calls) == {"GPU_DEVICE"}
    assert calls_named_in(module.two_gpus, calls) == {"DETECT"}


def test_the_2gpu_step_fits_its_time_box_and_the_check_one_command() -> None:
    module = _script()
    cap, one_gpu, finish = shell_value("CAP_2GPU"), shell_value("BUDGET_1GPU"), shell_value(
        "FINISH_S")
    launches = [c.kwargs["timeout_s"] for _, cs in module.plan(2)[len(module.plan(1)):]
                for c in cs if "timeout_s" in c.kwargs]
    assert len(launches) == 2  # DDP and FSDP2, each one launch
    assert sum(launches) + START_ALLOWANCE_S <= cap
    assert re.search(r'run_step record-2gpu "\$CAP_2GPU"', CHECK)
    assert "$((BUDGET_1GPU + CAP_2GPU))" in CHECK
    assert one_gpu + cap + KILL_GRACE_S + finish <= COMMAND_LIMIT_S


def test_the_2gpu_step_comes_right_after_the_record_and_before_the_tests() -> None:
    order = [m.group(1) for m in re.finditer(r"(?:run_step|skip) \"?([a-z0-9-]+)", CHECK)
             if m.group(1) in ("record", "record-2gpu", "pytest-gpu")]
    assert order == ["record", "record", "record-2gpu", "record-2gpu", "record-2gpu",
                     "pytest-gpu"]
