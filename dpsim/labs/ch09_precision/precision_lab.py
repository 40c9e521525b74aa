"""Chapter 9's real runs on ranks, in one launch: FSDP2 mixed precision, checkpointed
FSDP2 blocks, clipping under DDP and FSDP2, meta-device initialisation, ZeRO-1, offload.

Each part is its own module (`precision_measure`, `checkpointing`, `clipping`,
`meta_init`, `zero1`, `offload`); this one only runs them on the same ranks so the
chapter pays the start-up of the processes once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpsim.sim.checks import require_int

META_MODEL = {"width": 256, "hidden": 1024, "depth": 4}  # BlockStack sizes, ~8.4 MB fp32


def meta_rank(rank: int, world_size: int) -> dict[str, Any]:
    """On each rank: peak bytes of the meta path and of building the full model first."""
    from torch.distributed.device_mesh import init_device_mesh

    from dpsim.labs.ch06_fsdp.fsdp_train import param_shapes
    from dpsim.labs.ch06_fsdp.meta_init import allocation_peak, build_sharded
    from dpsim.runtime.models import BlockStack
    from dpsim.sim.cost.fsdp_shards import fsdp_rank_bytes

    mesh = init_device_mesh("cpu", (world_size,))

    def make() -> BlockStack:
        return BlockStack(META_MODEL["width"], META_MODEL["hidden"], META_MODEL["depth"])

    shapes = param_shapes(make())
    model, meta_peak = allocation_peak(lambda: build_sharded(make, mesh, "meta"))
    _, full_peak = allocation_peak(lambda: build_sharded(make, mesh, "full"))
    shard = fsdp_rank_bytes(shapes, world_size, rank, padded=True).parameters
    full = sum(4 * (s[0] * (s[1] if len(s) > 1 else 1)) for s in shapes)
    block = len(shapes) // META_MODEL["depth"]  # one unit: a block's tensors
    unit_shard = fsdp_rank_bytes(shapes[:block], world_size, rank, padded=True).parameters
    return {"meta_peak_B": meta_peak, "full_peak_B": full_peak,
            "predicted_meta_B": shard, "predicted_full_B": full + unit_shard,
            "full_model_B": full,
            "on_meta": sum(p.is_meta for p in model.parameters())}


def lab_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Every part, one after the other, on this rank."""
    from dpsim.labs.ch06_fsdp.zero1 import zero1_rank
    from dpsim.labs.ch09_precision.checkpointing import fsdp_checkpoint_rank
    from dpsim.labs.ch09_precision.clipping import clip_rank
    from dpsim.labs.ch09_precision.offload import offload_rank
    from dpsim.labs.ch09_precision.precision_measure import fsdp_mixed_rank

    return {"fsdp_mixed": fsdp_mixed_rank(rank, world_size),
            "checkpoint": fsdp_checkpoint_rank(rank, world_size),
            "clip": clip_rank(rank, world_size),
            "meta": meta_rank(rank, world_size),
            "zero1": zero1_rank(rank, world_size),
            "offload": offload_rank(rank, world_size)}


@dataclass
class PrecisionLab:
    """What the ranks measured, by part, one entry per rank (see each part's module)."""

    world_size: int
    fsdp_mixed: list[dict[str, Any]]
    checkpoint: list[dict[str, Any]]
    clip: dict[str, Any]  # clipping.summarize_clipping
    meta: list[dict[str, Any]]
    zero1: list[dict[str, Any]]
    offload: list[dict[str, Any]]


def run_precision_lab(world_size: int = 2, timeout_s: float = 180.0) -> PrecisionLab:
    """Launch `world_size` gloo ranks once and run every part of chapter 9 on them."""
    from dpsim.labs.ch09_precision.clipping import clip_reference, summarize_clipping
    from dpsim.runtime.launch import launch

    require_int("world_size", world_size, 2, 8)
    ranks = launch(lab_rank, world_size, backend="gloo", timeout_s=timeout_s)  # CPU meshes
    part = {k: [r[k] for r in ranks] for k in ranks[0]}
    return PrecisionLab(world_size, part["fsdp_mixed"], part["checkpoint"],
                        summarize_clipping(part["clip"], *clip_reference(0.5)),
                        part["meta"], part["zero1"], part["offload"])
