"""Chapter 12 checks: right answers pass, and each typical wrong answer is caught by name."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest

from dpsim.course.grading import run_check

# --- 12.1 ----------------------------------------------------------------------------------


def _rank_env(slurm: dict[str, str], head_addr: str, port: int,
              wrong: dict[str, str] | None = None) -> dict[str, Any]:
    """A learner's mapping; `wrong` maps a torch variable to the SLURM_* one it (wrongly) reads."""
    source = {"RANK": "SLURM_PROCID", "LOCAL_RANK": "SLURM_LOCALID",
              "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_WORLD_SIZE": "SLURM_NTASKS_PER_NODE"}
    source |= wrong or {}
    env: dict[str, Any] = {name: slurm[var] for name, var in source.items()}
    return env | {"MASTER_ADDR": head_addr, "MASTER_PORT": str(port)}


def test_12_1_the_mapping_passes() -> None:
    r = run_check("12.1", _rank_env)
    assert r.ok, r.message


def test_12_1_the_mapping_sets_a_real_environment() -> None:
    """The answer is an environment init_process_group can read: os.environ takes it."""
    from dpsim.course.exercises.ch12 import slurm_task_env, torch_env

    env = torch_env(slurm_task_env(2, 4, 5, 77), "127.0.0.1", 29500)
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("5", "8")
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.mark.parametrize(("wrong", "hint"), [
    ({"RANK": "SLURM_NODEID"}, "not its node's number"),
    ({"LOCAL_RANK": "SLURM_PROCID"}, "rank on its node (SLURM_LOCALID)"),
    ({"WORLD_SIZE": "SLURM_NNODES"}, "WORLD_SIZE counts tasks"),
    ({"WORLD_SIZE": "SLURM_JOB_NUM_NODES"}, "WORLD_SIZE counts tasks"),
    ({"LOCAL_WORLD_SIZE": "SLURM_NTASKS"}, "LOCAL_WORLD_SIZE counts the tasks on one node"),
])
def test_12_1_a_wrong_variable_is_named(wrong: dict[str, str], hint: str) -> None:
    r = run_check("12.1", lambda s, h, p: _rank_env(s, h, p, wrong=wrong))
    assert not r.ok
    assert hint in (r.message or "")


def test_12_1_ints_instead_of_strings_are_named() -> None:
    def ints(*a: Any) -> dict[str, Any]:
        return {k: int(v) if v.isdigit() else v for k, v in _rank_env(*a).items()}

    r = run_check("12.1", ints)
    assert not r.ok
    assert "an environment holds strings" in (r.message or "")


def test_12_1_the_port_as_an_int_is_named() -> None:
    r = run_check("12.1", lambda *a: _rank_env(*a) | {"MASTER_PORT": a[2]})
    assert not r.ok
    assert "MASTER_PORT is a port number as a string" in (r.message or "")


# --- 12.2 ----------------------------------------------------------------------------------

STEP = re.compile(r"step_(\d+)")


def _right(listing: dict[str, list[str]]) -> int:
    steps = [int(m.group(1)) for name, files in listing.items()
             if (m := STEP.fullmatch(name)) and ".metadata" in files]
    return max(steps, default=0)


def _any_folder(listing: dict[str, list[str]]) -> int:
    return max((int(m.group(1)) for name in listing if (m := STEP.fullmatch(name))), default=0)


def _metadata_prefix(listing: dict[str, list[str]]) -> int:
    """Was a false pass in the making: `.metadata.tmp` taken for `.metadata`."""
    return max((int(m.group(1)) for name, files in listing.items()
                if (m := STEP.fullmatch(name)) and any(f.startswith(".metadata") for f in files)),
               default=0)


def _as_strings(listing: dict[str, list[str]]) -> int:
    done = [name for name, files in listing.items() if name.startswith("step_")
            and ".metadata" in files]
    return int(max(done)[5:]) if done else 0


def _oldest(listing: dict[str, list[str]]) -> int:
    return min((int(m.group(1)) for name, files in listing.items()
                if (m := STEP.fullmatch(name)) and ".metadata" in files), default=0)


def test_12_2_the_newest_complete_checkpoint_passes() -> None:
    r = run_check("12.2", _right)
    assert r.ok, r.message


@pytest.mark.parametrize(("answer", "hint"), [
    (_any_folder, "a save cut short has no .metadata"),
    (_metadata_prefix, "a save cut short has no .metadata"),
    (_as_strings, "compare step numbers as numbers"),
    (_oldest, "not the oldest"),
    (lambda listing: str(_right(listing)), "as an int"),
])
def test_12_2_a_wrong_resume_point_is_named(answer: Callable[..., Any], hint: str) -> None:
    r = run_check("12.2", answer)
    assert not r.ok
    assert hint in (r.message or "")
