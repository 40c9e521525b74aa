"""Chapter 10's real runs without starting a process: their predictions and their bad input.

The runs themselves (DCP resharding, HSDP, the DDP checkpoint race, Join, the hung
collective) are executed by notebooks/10_checkpoints_and_failures.ipynb under nbval, which
compares every measured number with its prediction; the elastic restart by
tests/labs/test_elastic.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpsim.labs.ch10_failures.checkpoint_ddp import run_checkpoint_ddp
from dpsim.labs.ch10_failures.collective_timeout import run_hung_collective
from dpsim.labs.ch10_failures.dcp_reshard import MODEL, predicted_write_bytes, run_reshard
from dpsim.labs.ch10_failures.hsdp_train import predicted_collective_bytes, run_hsdp
from dpsim.labs.ch10_failures.join_syncbn import run_join_syncbn
from dpsim.runtime.fsdp_builders import fsdp_model, param_shapes
from dpsim.sim.cost.fsdp_shards import fsdp_rank_bytes
from tests.support.bad_input import raises_naming, wrong


def test_predicted_write_bytes_adds_adam_states_and_step_counters_on_rank_0() -> None:
    shapes = param_shapes(fsdp_model(MODEL))
    for rank in range(4):
        params = fsdp_rank_bytes(shapes, 4, rank).parameters
        extra = 4 * len(shapes) if rank == 0 else 0
        assert predicted_write_bytes(4, rank) == 3 * params + extra
    assert sum(predicted_write_bytes(4, r) for r in range(4)) == (
        3 * 4 * sum(s[0] * (s[1] if len(s) > 1 else 1) for s in shapes) + 4 * len(shapes))


def test_predicted_collective_bytes_pad_to_the_shard_size() -> None:
    got = predicted_collective_bytes([(5, 3), (5,)], replicate=2, shard_size=2)
    padded = (6 * 3 + 6) * 4 // 2  # ceil(5/2) = 3 rows per rank
    assert got == {"shard": {"all_gather": 2 * padded * 2, "reduce_scatter": padded * 2},
                   "replicate": {"all_reduce": padded}}
    assert predicted_collective_bytes([(4,)], 1, 4)["replicate"] == {}
    assert predicted_collective_bytes([(4,)], 4, 1)["shard"] == {}


@pytest.mark.parametrize(("call", "field"), [
    (lambda d: run_reshard(d, save_world_size=0), "save_world_size"),
    (lambda d: run_reshard(d, stop_at=6, total_steps=6), "stop_at"),
    (lambda d: run_reshard(d, global_batch=10), "global_batch"),
    (lambda d: run_reshard(os.path.join(d, "missing")), "ckpt_dir"),
    (lambda d: run_hsdp(world_size=4, replicate=3), "replicate"),
    (lambda d: run_hsdp(global_batch=6), "global_batch"),
    (lambda d: run_checkpoint_ddp(d, epochs=1), "epochs"),
    (lambda d: run_checkpoint_ddp(d, barriers=wrong((1,))), "barriers"),
    (lambda d: run_checkpoint_ddp(os.path.join(d, "missing")), "ckpt_dir"),
    (lambda d: run_hung_collective(timeout_s=0.0), "timeout_s"),
    (lambda d: run_join_syncbn(batches=(3,)), "len(batches)"),
    (lambda d: run_join_syncbn(batches=(3, 0)), "batches"),
])
def test_bad_input_names_the_field(tmp_path: Path, call, field: str) -> None:  # type: ignore[no-untyped-def]
    with raises_naming(field):
        call(str(tmp_path))
