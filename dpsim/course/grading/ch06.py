"""Chapter 6 exercises: ZeRO memory per device, shards with padding, the largest model.

Reference answers come from `dpsim.memory`; the sharding answers are confirmed with
torch (`F.pad` + `chunk`, then `cat`) while the cases are built (a disagreement is a bug in
dpsim, raised as RuntimeError, never blamed on the learner).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from dpsim.course.grading.core import Case, exercise
from dpsim.memory import max_params_that_fit, zero_bytes_per_device

GB = 10**9


def _zero_total(n_params: int, world_size: int, stage: int) -> int:
    return zero_bytes_per_device(n_params, world_size, stage).model_states


@exercise("6.1", function="zero_bytes_per_device_total",
          title="Model-state bytes per device under a ZeRO stage", points=2)
def _zero_cases(rng: random.Random) -> Iterator[Case]:
    stages = [0, 1, 2, 3, rng.choice([1, 2, 3])]
    for stage in stages:
        n = rng.choice([4, 8, 16, 64, 128])
        n_params = n * rng.randint(10**5, 10**7)  # a multiple of n: no rounding question
        right = _zero_total(n_params, n, stage)
        mistakes = {}
        if stage < 3:
            mistakes["you sharded one category too many (stage + 1)"] = _zero_total(
                n_params, n, stage + 1)
        if stage > 0:
            mistakes["you sharded one category too few (stage - 1)"] = _zero_total(
                n_params, n, stage - 1)
        mistakes["you counted 4 optimizer bytes per parameter, not 12 (the fp32 master copy "
                 "is part of the optimizer state)"] = zero_bytes_per_device(
            n_params, n, stage, optimizer_bytes=4).model_states
        mistakes["you divided everything by N whatever the stage"] = 16 * n_params // n
        yield Case(f"n_params={n_params:,}, world_size={n}, stage={stage}",
                   args=(n_params, n, stage), expected=right, mistakes=mistakes)


def reference_shards(flat: list[float], world_size: int) -> list[list[float]]:
    """Zero-pad `flat` to a multiple of world_size and cut it into equal shards (torch)."""
    t = torch.tensor(flat, dtype=torch.float64)
    pad = -len(flat) % world_size
    shards = [s.tolist() for s in F.pad(t, (0, pad)).chunk(world_size)] if len(flat) else [
        [] for _ in range(world_size)]
    chunk = -(-len(flat) // world_size)
    if any(len(s) != chunk for s in shards) or len(shards) != world_size:
        raise RuntimeError(f"dpsim bug: shards of {len(flat)} over {world_size} are uneven")
    return shards


def _flat_cases(rng: random.Random) -> list[tuple[list[float], int]]:
    out = []
    for length, n in ((10, 4), (7, 3), (12, 4), (3, 5), (rng.randint(20, 60), rng.randint(2, 8))):
        out.append(([round(rng.uniform(-5, 5), 3) for _ in range(length)], n))
    return out


@exercise("6.2", function="shard_with_padding", title="Shard a flat parameter with padding",
          points=2)
def _shard_cases(rng: random.Random) -> Iterator[Case]:
    for flat, n in _flat_cases(rng):
        right = reference_shards(flat, n)
        chunk = -(-len(flat) // n)
        unpadded = [flat[r * chunk:(r + 1) * chunk] for r in range(n)]
        floor_chunk = len(flat) // n
        mistakes = {
            "you did not pad the last shards with zeros to the same length": unpadded,
            "you rounded the shard size down (use ceil(numel / world_size))":
                [flat[r * floor_chunk:(r + 1) * floor_chunk] for r in range(n)],
        }
        yield Case(f"flat of {len(flat)} elements, world_size={n}", args=(list(flat), n),
                   expected=right, mistakes=mistakes)


@exercise("6.3", function="all_gather_unpad",
          title="Put the shards back together (all-gather) and drop the padding", points=1)
def _gather_cases(rng: random.Random) -> Iterator[Case]:
    for flat, n in _flat_cases(rng):
        shards = reference_shards(flat, n)
        joined = torch.cat([torch.tensor(s, dtype=torch.float64) for s in shards]).tolist()
        if joined[:len(flat)] != flat:
            raise RuntimeError("dpsim bug: gathered shards differ from the flat parameter")
        yield Case(f"{n} shards of {len(shards[0])} for a parameter of {len(flat)} elements",
                   args=([list(s) for s in shards], len(flat)), expected=list(flat),
                   mistakes={"you kept the padding at the end": joined})


@exercise("6.4", function="largest_model", title="The largest model that fits", points=2)
def _largest_cases(rng: random.Random) -> Iterator[Case]:
    for stage in (0, 1, 2, 3):
        memory_GB = rng.choice([16, 24, 40, 80])
        n = rng.choice([8, 64, 256])
        right = max_params_that_fit(memory_GB * GB, n, stage)
        mistakes = {
            "you used GiB (2**30) where the question says GB (10**9)":
                max_params_that_fit(memory_GB * 2**30, n, stage),
        }
        if stage < 3:
            mistakes["you sharded every category whatever the stage"] = max_params_that_fit(
                memory_GB * GB, n, 3)
        if stage > 0:
            mistakes["you used the formula of the previous stage"] = max_params_that_fit(
                memory_GB * GB, n, stage - 1)
        yield Case(f"memory_GB={memory_GB}, world_size={n}, stage={stage}",
                   args=(memory_GB, n, stage), expected=right, mistakes=mistakes,
                   rel_tol=1e-6)
