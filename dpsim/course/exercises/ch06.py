"""Chapter 6 exercises: ZeRO memory per device, FSDP2 shards, the largest model, ZeRO-1 by hand.

Reference answers come from `dpsim.sim.cost.memory`; the sharding answers are confirmed with
torch (`F.pad` + `chunk`, then `cat`) while the cases are built (a disagreement is a bug in
dpsim, raised as RuntimeError, never blamed on the learner).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from dpsim.course.grading.registry import Case, exercise
from dpsim.sim import fsdp_shard_rows, max_params_that_fit, zero_bytes_per_device

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
    """Zero-pad `flat` to a multiple of world_size and cut it into equal shards (FSDP1, torch)."""
    t = torch.tensor(flat, dtype=torch.float64)
    pad = -len(flat) % world_size
    shards = [s.tolist() for s in F.pad(t, (0, pad)).chunk(world_size)] if len(flat) else [
        [] for _ in range(world_size)]
    chunk = -(-len(flat) // world_size)
    if any(len(s) != chunk for s in shards) or len(shards) != world_size:
        raise RuntimeError(f"dpsim bug: shards of {len(flat)} over {world_size} are uneven")
    return shards


def fsdp2_shards(param: list[Any], world_size: int) -> list[list[Any]]:
    """What `.to_local()` holds on each rank after `fully_shard`: torch.chunk along dim 0,
    empty for the ranks past the end (FSDP2's `_chunk_with_empty`)."""
    t = torch.tensor(param, dtype=torch.float64)
    chunks = [c.tolist() for c in torch.chunk(t, world_size, dim=0)]
    chunks += [[] for _ in range(world_size - len(chunks))]
    rows = [fsdp_shard_rows(len(param), world_size, r) for r in range(world_size)]
    if [len(c) for c in chunks] != rows:
        raise RuntimeError("dpsim.sim.cost.fsdp_shards.fsdp_shard_rows disagrees with torch.chunk")
    return chunks


def _param(rng: random.Random, rows: int, cols: int) -> list[Any]:
    if cols == 0:  # a bias: one dimension
        return [round(rng.uniform(-5, 5), 3) for _ in range(rows)]
    return [[round(rng.uniform(-5, 5), 3) for _ in range(cols)] for _ in range(rows)]


@exercise("6.2", function="fsdp2_shard",
          title="FSDP2's shards: each parameter cut along dim 0", points=2,
          forbidden=("dpsim.sim.cost.fsdp_shards.fsdp_shard_rows",
                     "dpsim.sim.cost.fsdp_shards.fsdp_shard_numel"))
def _shard_cases(rng: random.Random) -> Iterator[Case]:
    shapes = [(7, 3, 4), (5, 2, 4), (2, 0, 3), (12, 0, 4), (rng.randint(9, 20), 2, 3),
              (1, rng.randint(2, 4), 2)]  # (rows, columns, world_size); 0 columns: a bias
    for rows, cols, n in shapes:
        param = _param(rng, rows, cols)
        right = fsdp2_shards(param, n)
        chunk = -(-rows // n)
        floor = max(1, rows // n)
        width = [0.0] * cols if cols else 0.0
        padded = [s + [width] * (chunk - len(s)) for s in right]
        flat = [x for row in param for x in (row if cols else [row])]
        yield Case(f"a parameter of shape {(rows, cols) if cols else (rows,)}, "
                   f"world_size={n}", args=(param, n), expected=right, mistakes={
                       "you padded the short shards with zero rows; FSDP2 pads only the "
                       "memory it allocates, .to_local() holds the real rows": padded,
                       "you flattened the parameter like FSDP1; FSDP2 keeps each parameter's "
                       "shape and cuts along dim 0": reference_shards(flat, n),
                       "you rounded the rows per rank down (use ceil(dim0 / world_size))":
                           [param[r * floor:(r + 1) * floor] for r in range(n)],
                       "you dealt rows round-robin; each rank takes a contiguous block":
                           [param[r::n] for r in range(n)],
                   })


def _flat_cases(rng: random.Random) -> list[tuple[list[float], int]]:
    out = []
    for length, n in ((10, 4), (7, 3), (12, 4), (3, 5), (rng.randint(20, 60), rng.randint(2, 8))):
        values = [round(rng.uniform(-5, 5), 3) for _ in range(length)]
        for i in rng.sample(range(length), k=max(1, length // 4)):
            values[i] = 0.0  # real zeros inside the shards, not padding
        if length == 10:
            values[-1] = 0.0  # one ends in a real zero: stripping trailing zeros is wrong
        out.append((values, n))
    return out


def _rstrip_zeros(values: list[float]) -> list[float]:
    end = len(values)
    while end and values[end - 1] == 0.0:
        end -= 1
    return values[:end]


@exercise("6.3", function="all_gather_unpad",
          title="Put the shards back together (all-gather) and drop the padding", points=1)
def _gather_cases(rng: random.Random) -> Iterator[Case]:
    for flat, n in _flat_cases(rng):
        shards = reference_shards(flat, n)
        joined = torch.cat([torch.tensor(s, dtype=torch.float64) for s in shards]).tolist()
        if joined[:len(flat)] != flat:
            raise RuntimeError("dpsim bug: gathered shards differ from the flat parameter")
        yield Case(f"{n} shards of {len(shards[0])} for a parameter of {len(flat)} elements "
                   "(some of them 0.0)",
                   args=([list(s) for s in shards], len(flat)), expected=list(flat),
                   mistakes={"you kept the padding at the end": joined,
                             "you joined the shards in reverse order: rank 0's shard comes "
                             "first": [x for s in reversed(shards) for x in s][:len(flat)],
                             "you dropped every 0.0, but the parameter has zeros of its own: "
                             "cut at numel instead": [x for x in joined if x != 0.0],
                             "you stripped the trailing zeros, but the parameter can end in "
                             "zeros of its own: cut at numel instead": _rstrip_zeros(joined)})


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
            mistakes["you kept DDP's 16 bytes per parameter on every device whatever the "
                     "stage; ZeRO stage 1 shards the optimizer state, 2 the gradients too, 3 "
                     "the parameters too"] = max_params_that_fit(memory_GB * GB, n, 0)
        yield Case(f"memory_GB={memory_GB}, world_size={n}, stage={stage}",
                   args=(memory_GB, n, stage), expected=right, mistakes=mistakes,
                   rel_tol=1e-6)

