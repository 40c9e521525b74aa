"""The tripwires on an exercise's `forbidden` reference answers, however they are reached.

A fresh copy of the reference's module (importlib.reload, spec_from_file_location +
exec_module, exec of its source) escaped the tripwires on the name and the function object
and earned full marks in 2.1, 2.2, 6.2, 9.1, 9.3, 10.2 and 10.3 (9.3's reference has since
left the library); `sandbox_worker.tripwires` now watches which code runs, for every
exercise. Each answer below is right (it earns full marks with the tripwires off) and reaches
the reference through a copy.

The checks run in the real sandbox (a reload there changes only the disposable child), and
in this process for the copies that leave the imported modules alone.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

import pytest

from dpsim.course.grading import get_exercise, run_check
from dpsim.course.grading.core import judge
from dpsim.course.grading.sandbox_worker import PROFILE_REMOVED, reference_code, tripwires

HOWS = ("reload", "spec_from_file_location", "exec_source")


def learner(exercise_id: str, how: str) -> Callable[..., Any]:
    """A right answer to `exercise_id` that calls its reference through a copy made `how`.

    Everything it uses is defined inside it (dill ships it by value to the sandbox)."""

    def fresh(dotted: str) -> Any:
        import importlib
        import importlib.util
        import sys
        import types

        module_name, _, attr = dotted.rpartition(".")
        module = importlib.import_module(module_name)
        if how == "reload":
            return getattr(importlib.reload(module), attr)
        name = f"copy_of_{module_name.replace('.', '_')}"
        if how == "spec_from_file_location":
            spec = importlib.util.spec_from_file_location(name, module.__file__)
            assert spec is not None
            assert spec.loader is not None
            copy = importlib.util.module_from_spec(spec)
            sys.modules[name] = copy  # dataclasses look their module up while it runs
            spec.loader.exec_module(copy)
        else:
            copy = types.ModuleType(name)
            sys.modules[name] = copy
            with open(module.__file__ or "", encoding="utf-8") as f:
                exec(compile(f.read(), name, "exec"), copy.__dict__)
        return getattr(copy, attr)

    def shard_6_2(param: list[Any], world_size: int) -> list[Any]:
        rows = fresh("dpsim.sim.cost.fsdp_shards.fsdp_shard_rows")
        out, start = [], 0
        for rank in range(world_size):
            n = rows(len(param), world_size, rank)
            out.append(list(param[start:start + n]))
            start += n
        return out

    def amp_9_1(model: Any, optimizer: Any, x: Any, y: Any) -> list[int]:
        import torch
        from torch import nn

        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        b = fresh("dpsim.runtime.measure.model_state_breakdown")(model, optimizer)
        return [b.parameters, b.gradients, b.optimizer]

    def reshard_10_2(shards: list[Any], world_size: int) -> list[Any]:
        import torch

        rows = fresh("dpsim.sim.cost.fsdp_shards.fsdp_shard_rows")
        full = torch.cat(list(shards), dim=0)
        out, start = [], 0
        for rank in range(world_size):
            n = rows(len(full), world_size, rank)
            out.append(full[start:start + n].tolist())
            start += n
        return out

    def traffic_10_3(n_params: int, world_size: int, shard_size: int,
                     bytes_per_param: int) -> dict[str, int]:
        traffic = fresh("dpsim.sim.strategies.fsdp.hsdp.hsdp_traffic")
        t = traffic(n_params, world_size, shard_size, bytes_per_param)
        return {"shard": t.shard_bytes, "replicate": t.replicate_bytes}

    def bytes_2_1(nbytes: int, world_size: int, algorithm: str) -> list[int]:
        sent = fresh("dpsim.sim.collectives.cost.bytes_sent_per_rank")
        return list(sent("all_reduce", nbytes, world_size, algorithm))

    answers: dict[str, Callable[..., Any]] = {
        "2.1": bytes_2_1, "6.2": shard_6_2, "9.1": amp_9_1,
        "10.2": reshard_10_2, "10.3": traffic_10_3}
    return answers[exercise_id]


EXERCISES = ("2.1", "6.2", "9.1", "10.2", "10.3")


def unguarded(exercise_id: str, fn: Callable[..., Any]) -> bool:
    """Whether `fn` earns full marks with no tripwires: what it earned before."""
    from dpsim.course.grading.core import _calls
    from dpsim.course.grading.plain import decode
    from dpsim.course.grading.reply import Reply
    from dpsim.course.grading.sandbox_worker import outcome

    ex = get_exercise(exercise_id)
    cases = ex.cases()
    reply = Reply()
    with tripwires(()) as tripped:
        for i, (call, args, kwargs) in enumerate(_calls(cases)):
            reply.outcomes[i] = decode(outcome(i, fn, call, args, kwargs, tripped))
    return judge(ex, cases, reply, 60.0).ok


@pytest.mark.parametrize("exercise_id", EXERCISES)
@pytest.mark.parametrize("how", ["spec_from_file_location", "exec_source"])
def test_a_copy_of_the_reference_is_forbidden_in_process(exercise_id: str, how: str) -> None:
    """Before: full marks (as with no tripwires at all); now 0, calling the reference."""
    before = set(sys.modules)
    try:
        fn = learner(exercise_id, how)
        assert unguarded(exercise_id, fn)
        result = run_check(exercise_id, fn)
    finally:
        for name in set(sys.modules) - before:
            if name.startswith("copy_of_"):
                del sys.modules[name]
    assert result.passed == 0, result
    assert "write it yourself, not to call dpsim." in (result.message or "")


@pytest.mark.slow  # one sandbox server (imports torch), 18 checks: about 20 s
def test_every_copy_of_every_reference_is_forbidden_in_the_sandbox() -> None:
    from dpsim.course.grading.sandbox import Sandbox

    wrong = {}
    with Sandbox() as sandbox:
        for exercise_id in EXERCISES:
            for how in HOWS:
                result = run_check(exercise_id, learner(exercise_id, how), sandbox=sandbox)
                if result.passed or "write it yourself" not in (result.message or ""):
                    wrong[exercise_id, how] = result.message
    assert not wrong, wrong


def test_removing_the_watcher_is_a_forbidden_call() -> None:
    def unwatched(n_params: int, world_size: int, shard_size: int,
                  bytes_per_param: int) -> dict[str, int]:
        import sys

        sys.setprofile(None)
        m = n_params * bytes_per_param
        f, r = shard_size, world_size // shard_size
        return {"shard": 3 * m * (f - 1) // f, "replicate": 2 * (m // f) * (r - 1) // r}

    result = run_check("10.3", unwatched)
    assert result.passed == 0
    assert PROFILE_REMOVED in (result.message or "")
    assert sys.getprofile() is None  # restored after the check


def test_every_forbidden_function_has_a_fingerprint() -> None:
    """The watcher knows every forbidden function's code (a name it cannot compile from
    source would be guarded by the tripwires on its name only)."""
    from dpsim.course.grading import all_exercises

    names = {name for ex in all_exercises() for name in ex.forbidden}
    assert names
    assert {name for name in names if reference_code(name) is None} == set()


def test_reload_in_process_is_forbidden_for_a_module_without_state() -> None:
    """importlib.reload of fsdp_shards (plain functions, no classes) in this process."""
    import dpsim.sim.cost.fsdp_shards as shards

    saved = dict(shards.__dict__)
    try:
        result = run_check("6.2", learner("6.2", "reload"))
    finally:
        shards.__dict__.update(saved)
        importlib.invalidate_caches()
    assert result.passed == 0
    assert "not to call dpsim.sim.cost.fsdp_shards.fsdp_shard_rows" in (result.message or "")
