"""Chapter 6 checks: right answers pass, and each typical wrong answer is caught."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from dpsim.course.grading import ExerciseFailed, check, core, get_exercise, run_check
from dpsim.course.grading.ch06 import reference_shards


def answer_hidden(result: core.CheckResult) -> bool:
    """True if the failed case's expected value is nowhere in the message (label aside)."""
    assert result.message is not None
    body = result.message.replace(result.failed_label or "", "")
    body = re.sub(r"\(\d+ of \d+ cases passed\)", "", body)
    return re.search(rf"(?<![\w.]){re.escape(str(result.expected))}(?![\w.])", body) is None


# --- right answers -----------------------------------------------------------------------

def zero_total(n_params: int, world_size: int, stage: int) -> int:
    p = 2 * n_params // (world_size if stage >= 3 else 1)
    g = 2 * n_params // (world_size if stage >= 2 else 1)
    o = 12 * n_params // (world_size if stage >= 1 else 1)
    return p + g + o


def shard_numpy(flat: list[float], world_size: int) -> list[np.ndarray]:
    """Another right answer: numpy pad + split."""
    chunk = math.ceil(len(flat) / world_size)
    padded = np.pad(np.asarray(flat, dtype=np.float64), (0, chunk * world_size - len(flat)))
    return np.split(padded, world_size)


def shard_torch(flat: list[float], world_size: int) -> list[torch.Tensor]:
    chunk = -(-len(flat) // world_size)
    t = torch.zeros(chunk * world_size, dtype=torch.float64)
    t[:len(flat)] = torch.tensor(flat, dtype=torch.float64)
    return list(t.chunk(world_size))


def gather(shards: list[list[float]], numel: int) -> list[float]:
    return [x for s in shards for x in s][:numel]


def largest(memory_GB: float, world_size: int, stage: int) -> int:
    n = world_size
    per = 2 / (n if stage >= 3 else 1) + 2 / (n if stage >= 2 else 1) + 12 / (
        n if stage >= 1 else 1)
    return int(memory_GB * 1e9 / per)


RIGHT: list[tuple[str, Callable[..., Any]]] = [
    ("6.1", zero_total), ("6.2", shard_numpy), ("6.2", shard_torch), ("6.3", gather),
    ("6.4", largest),
]


@pytest.mark.parametrize(("exercise_id", "fn"), RIGHT)
def test_right_answers_pass(exercise_id: str, fn: Callable[..., Any],
                            capsys: pytest.CaptureFixture[str]) -> None:
    check(exercise_id, fn)
    n = len(get_exercise(exercise_id).cases())
    assert capsys.readouterr().out.strip() == f"PASS {exercise_id} ({n}/{n})"


# --- wrong answers -----------------------------------------------------------------------

def zero_stage_plus_one(n_params: int, world_size: int, stage: int) -> int:
    return zero_total(n_params, world_size, min(stage + 1, 3))


def zero_k4(n_params: int, world_size: int, stage: int) -> int:
    n = world_size
    return (2 * n_params // (n if stage >= 3 else 1) + 2 * n_params // (n if stage >= 2 else 1)
            + 4 * n_params // (n if stage >= 1 else 1))


def zero_all_sharded(n_params: int, world_size: int, stage: int) -> int:
    return 16 * n_params // world_size


def shard_unpadded(flat: list[float], world_size: int) -> list[list[float]]:
    chunk = -(-len(flat) // world_size)
    return [flat[r * chunk:(r + 1) * chunk] for r in range(world_size)]


def shard_floor(flat: list[float], world_size: int) -> list[list[float]]:
    chunk = len(flat) // world_size
    return [flat[r * chunk:(r + 1) * chunk] for r in range(world_size)]


def shard_round_robin(flat: list[float], world_size: int) -> list[list[float]]:
    chunk = -(-len(flat) // world_size)
    padded = flat + [0.0] * (chunk * world_size - len(flat))
    return [padded[r::world_size] for r in range(world_size)]


def gather_keep_padding(shards: list[list[float]], numel: int) -> list[float]:
    return [x for s in shards for x in s]


def gather_reversed(shards: list[list[float]], numel: int) -> list[float]:
    return [x for s in reversed(shards) for x in s][:numel]


def largest_gib(memory_GB: float, world_size: int, stage: int) -> int:
    return largest(memory_GB * 2**30 / 1e9, world_size, stage)


def largest_ddp(memory_GB: float, world_size: int, stage: int) -> int:
    return int(memory_GB * 1e9 / 16)


def stub(*args: Any) -> Any:
    raise NotImplementedError("write your code here")


WRONG: list[tuple[str, Callable[..., Any], str]] = [
    ("6.1", zero_stage_plus_one, "one category too many"),
    ("6.1", zero_k4, "4 optimizer bytes"),
    ("6.1", zero_all_sharded, "whatever the stage"),
    ("6.2", shard_unpadded, "did not pad"),
    ("6.2", shard_floor, "rounded the shard size down"),
    ("6.2", shard_round_robin, "not the right one"),
    ("6.3", gather_keep_padding, "entries; it needs"),
    ("6.3", gather_reversed, "not the right one"),
    ("6.4", largest_gib, "GiB"),
    ("6.4", largest_ddp, ""),
]


@pytest.mark.parametrize(("exercise_id", "fn", "hint"), WRONG)
def test_wrong_answers_are_caught(exercise_id: str, fn: Callable[..., Any], hint: str) -> None:
    result = run_check(exercise_id, fn)
    assert not result.ok
    assert result.message is not None
    assert hint in result.message
    assert answer_hidden(result)
    with pytest.raises(ExerciseFailed):
        check(exercise_id, fn)


@pytest.mark.parametrize("exercise_id", ["6.1", "6.2", "6.3", "6.4"])
def test_stub_says_not_done(exercise_id: str) -> None:
    result = run_check(exercise_id, stub)
    assert result.message is not None
    assert "not done yet" in result.message


def test_reference_shards_match_fsdp1_flat_padding() -> None:
    assert reference_shards([1.0, 2.0, 3.0, 4.0, 5.0], 2) == [[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]]
    assert reference_shards([1.0], 3) == [[1.0], [0.0], [0.0]]
    assert reference_shards([], 2) == [[], []]
