"""FSDP2 sharded checkpoints with torch.distributed.checkpoint (DCP), saved at one world size
and loaded at another.

`save_rank` trains the chapter-6 residual model with FSDP2 for `stop_at` steps on N ranks,
takes its state with `get_model_state_dict` / `get_optimizer_state_dict` (DTensor shards,
nothing gathered) and writes it with `dcp.save`: every rank writes its own file. `load_rank`
builds the same model on M ranks, reads the checkpoint with `dcp.load` into its own M-way
shards (DCP reads the overlapping byte ranges of the saved shards), puts it back with
`set_model_state_dict` / `set_optimizer_state_dict`, and trains to the end. Every global
batch is the same whatever the world size, so the final parameters equal one process
trained on the whole batch (up to float32 summation order: `TOLERANCE`).
After training, `load_rank` also gathers a full (unsharded) state dict on rank 0
(`full_state_dict=True`) and, given `export_dir`, saves it for inference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dpsim.runtime.fsdp_builders import (
    fsdp_model,
    param_shapes,
    shard,
    train_one_process,
    training_batches,
)
from dpsim.sim import fsdp_rank_bytes, require_int, require_range

MODEL = "residual"
# max |resumed FSDP - one process| per parameter element. Ranks sum gradients in a different
# order at each world size (fp32: ~6e-8 relative per addition); Adam divides by sqrt(v), so a
# gradient error of a few ulps moves a parameter by at most lr * (a few 1e-7) per step: the
# errors measured are ~1e-7 after 6 steps at lr=1e-2, and 1e-5 leaves a 50x margin.
TOLERANCE = 1e-5
ADAM_STATES = 2  # exp_avg and exp_avg_sq, each the shape of its parameter


def _train(model: nn.Module, opt: torch.optim.Optimizer, rank: int, world_size: int,
           steps: range, global_batch: int, seed: int, total_steps: int) -> list[float]:
    """Train `steps` (global step numbers) on this rank's slice of every global batch."""
    x, y = training_batches(total_steps, global_batch, seed)
    per = global_batch // world_size
    losses = []
    for step in steps:
        lo = step * global_batch + rank * per
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x[lo:lo + per]), y[lo:lo + per])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _sharded(world_size: int, lr: float, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh

    model = shard(fsdp_model(MODEL, seed), init_device_mesh("cpu", (world_size,)))
    return model, torch.optim.Adam(model.parameters(), lr=lr)


def predicted_write_bytes(world_size: int, rank: int, seed: int = 0) -> int:
    """Tensor bytes rank `rank` writes: its parameter shards and two Adam states of the same
    shape (fp32); rank 0 also writes the replicated per-parameter `step` counters (DCP saves a
    replicated tensor once; `save_rank` asks for it on the lowest rank)."""
    shapes = param_shapes(fsdp_model(MODEL, seed))
    params = fsdp_rank_bytes(shapes, world_size, rank).parameters
    steps = 4 * len(shapes) if rank == 0 else 0  # one fp32 scalar per parameter
    return params * (1 + ADAM_STATES) + steps


def save_rank(rank: int, world_size: int, ckpt_dir: str, stop_at: int, total_steps: int,
              global_batch: int, lr: float, seed: int) -> dict[str, Any]:
    """Train `stop_at` steps with FSDP2, then write a sharded DCP checkpoint."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultSavePlanner
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    model, opt = _sharded(world_size, lr, seed)
    losses = _train(model, opt, rank, world_size, range(stop_at), global_batch, seed,
                    total_steps)
    state = {"model": get_model_state_dict(model),
             "optim": get_optimizer_state_dict(model, opt)}
    # replicated items (Adam's step counters, param_groups) go to rank 0, not to the rank with
    # the fewest bytes planned so far (DCP's default), so that the prediction is simple
    dcp.save(state, checkpoint_id=ckpt_dir,
             planner=DefaultSavePlanner(dedup_save_to_lowest_rank=True))
    return {"losses": losses, "predicted": predicted_write_bytes(world_size, rank, seed)}


def load_rank(rank: int, world_size: int, ckpt_dir: str, stop_at: int, total_steps: int,
              global_batch: int, lr: float, seed: int, export_dir: str | None
              ) -> dict[str, Any]:
    """Read the checkpoint into this world size's shards, train to the end, gather."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    model, opt = _sharded(world_size, lr, seed + 1)  # other initial values: the load must win
    model_sd, optim_sd = get_model_state_dict(model), get_optimizer_state_dict(model, opt)
    dcp.load({"model": model_sd, "optim": optim_sd}, checkpoint_id=ckpt_dir)  # in place
    set_model_state_dict(model, model_sd)
    set_optimizer_state_dict(model, opt, optim_sd)
    losses = _train(model, opt, rank, world_size, range(stop_at, total_steps), global_batch,
                    seed, total_steps)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                cpu_offload=True))
    if rank == 0 and export_dir is not None:
        torch.save(full, os.path.join(export_dir, f"full_ws{world_size}.pt"))
    local = sum(p.to_local().numel() for p in model.parameters())  # type: ignore[attr-defined]
    return {"losses": losses, "local_numel": local,
            "params": {k: torch.as_tensor(v).clone() for k, v in full.items()} if rank == 0
            else None}


def _mean_losses(ranks: list[dict[str, Any]]) -> list[float]:
    """Per step, the mean of the ranks' losses (each on an equal slice: the global loss)."""
    return [sum(step) / len(step) for step in zip(*(r["losses"] for r in ranks), strict=True)]


def written_bytes(ckpt_dir: str) -> dict[str, dict[str, int]]:
    """Per file of a DCP checkpoint: its size, the tensor bytes its items hold (from the
    checkpoint's own metadata: chunk sizes x element size) and how many items it holds."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    meta = dcp.FileSystemReader(ckpt_dir).read_metadata()
    out = {p.name: {"file": p.stat().st_size, "tensor": 0, "items": 0}
           for p in Path(ckpt_dir).glob("*.distcp")}
    for index, info in (meta.storage_data or {}).items():
        entry = out[info.relative_path]
        entry["items"] += 1
        md = meta.state_dict_metadata[index.fqn]
        if isinstance(md, TensorStorageMetadata):
            chunk = next(c for c in md.chunks if tuple(c.offsets) == tuple(index.offset or ()))
            entry["tensor"] += chunk.sizes.numel() * md.properties.dtype.itemsize
    return out


@dataclass
class ReshardRun:
    """A checkpoint saved at one world size and loaded at others (bytes, parameters)."""

    save_world_size: int
    rank_file_bytes: list[int]  # size of each rank's .distcp file (measured)
    rank_tensor_bytes: list[int]  # tensor bytes in each rank's file (its metadata)
    rank_items: list[int]  # items (tensors, pickled objects) in each rank's file
    predicted_bytes: list[int]  # tensor bytes each rank writes (dpsim.sim.cost.fsdp_shards)
    max_abs_diff: dict[int, float]  # load world size -> max |resumed - one process|
    losses: dict[int, list[float]]  # load world size -> global mean loss of every step
    exported: dict[int, str]  # load world size -> path of the full state dict

    @property
    def overhead_per_item(self) -> list[float]:
        """(file - tensor bytes) / items per rank: the container DCP wraps each item in
        (`torch.save` of one tensor, a zip archive), in bytes."""
        return [(f - t) / max(1, n) for f, t, n in zip(
            self.rank_file_bytes, self.rank_tensor_bytes, self.rank_items, strict=True)]


def run_reshard(ckpt_dir: str, save_world_size: int = 4, load_world_sizes: tuple[int, ...] = (
        2, 3), *, stop_at: int = 3, total_steps: int = 6, global_batch: int = 12,
        lr: float = 1e-2, seed: int = 0, timeout_s: float = 120.0) -> ReshardRun:
    """Save at `save_world_size` after `stop_at` steps, resume at each load world size.

    `ckpt_dir`: an empty, writable directory (a temporary one); the checkpoint goes to
    `ckpt_dir/step{stop_at}`, full state dicts to `ckpt_dir/full_ws{M}.pt`.
    """
    from dpsim.runtime.launch import launch

    require_int("save_world_size", save_world_size, 1, 8)
    for m in load_world_sizes:
        require_int("load_world_sizes", m, 1, 8)
    require_int("total_steps", total_steps, 2, 1000)
    require_int("stop_at", stop_at, 1, total_steps - 1)
    require_int("global_batch", global_batch, 1, 1 << 16)
    for n in (save_world_size, *load_world_sizes):
        if global_batch % n:
            raise ValueError(f"global_batch={global_batch} does not split over world size {n}; "
                             "allowed: a multiple of every world size")
    require_range("lr", lr, 0, low_inclusive=False)
    root = Path(ckpt_dir)
    if not root.is_dir():
        raise ValueError(f"ckpt_dir={ckpt_dir!r} is not a directory; allowed: an existing "
                         "writable directory (e.g. tempfile.mkdtemp())")
    path = str(root / f"step{stop_at}")
    args = (stop_at, total_steps, global_batch, lr, seed)
    saved = launch(save_rank, save_world_size, args=(path, *args), backend="gloo",
                   timeout_s=timeout_s)
    files = written_bytes(path)
    names = [f"__{r}_0.distcp" for r in range(save_world_size)]
    ref, _ = train_one_process(MODEL, total_steps, global_batch, lr, seed)
    diffs, losses, exported = {}, {}, {}
    for m in load_world_sizes:
        ranks = launch(load_rank, m, args=(path, *args, str(root)), backend="gloo",
                       timeout_s=timeout_s)
        params = ranks[0]["params"]
        diffs[m] = max(float((params[k] - v).abs().max()) for k, v in ref.items())
        losses[m] = _mean_losses(saved) + _mean_losses(ranks)
        exported[m] = str(root / f"full_ws{m}.pt")
    return ReshardRun(save_world_size, [files[n]["file"] for n in names],
                      [files[n]["tensor"] for n in names], [files[n]["items"] for n in names],
                      [s["predicted"] for s in saved], diffs, losses, exported)
