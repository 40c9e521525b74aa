"""A real FSDP2 run: `fully_shard` per block then the root, over a 1-D device mesh.

Each rank builds the same seeded model, shards it, and trains on its slice of every
global batch (gloo on CPU, NCCL on GPUs). After the last step each rank reports the bytes
of its local shards (`fsdp_builders.measure_shards`: parameters, gradients, optimizer
state), both unpadded and as allocated, next to dpsim's prediction
(`fsdp_shards.fsdp_rank_bytes`), and its part of the timeline recorded with torch.profiler
(FSDP's own `FSDP::all_gather` / `FSDP::post_backward_reduce` ranges). On a GPU,
torch.cuda memory statistics are sampled through the last step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dpsim.runtime.fsdp_builders import (
    MODELS,
    blocks_of,
    check_mesh,
    fsdp_model,
    measure_shards,
    param_shapes,
    shard,
    train_one_process,
    training_batches,
)
from dpsim.runtime.fsdp_record import CudaSampler, profile_to_trace, quiet_stderr
from dpsim.sim import (
    MemoryBreakdown,
    Trace,
    fsdp_rank_bytes,
    require_choice,
    require_int,
    require_range,
)


def fsdp_rank(rank: int, world_size: int, models: tuple[str, ...] = ("mlp",), steps: int = 3,
              batch_size: int = 4, lr: float = 1e-2, seed: int = 0,
              mesh_size: int | None = None, record: bool = True) -> dict[str, Any]:
    """Worker run on every rank by `launch`: train each model with FSDP2, measure, record."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from dpsim.runtime.optimizers import build_optimizer

    check_mesh(world_size, mesh_size)
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    mesh = init_device_mesh(device.type, (world_size,))
    out: dict[str, Any] = {}
    for name in models:
        model = fsdp_model(name, seed)
        shapes = param_shapes(model)
        shard(model.to(device), mesh)
        opt = build_optimizer("adam", model.parameters(), lr)
        x, y = training_batches(steps, batch_size * world_size, seed)
        losses: list[float] = []
        trace: Trace | None = None
        cuda_stats: dict[str, int] | None = None
        for step in range(steps):
            lo = step * batch_size * world_size + rank * batch_size
            xb, yb = x[lo:lo + batch_size].to(device), y[lo:lo + batch_size].to(device)
            last = step == steps - 1
            if last and cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            if last and record:
                dist.barrier()  # the recorded step starts together on every rank
            prof = (torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                    if last and record else None)
            if prof is not None:
                with quiet_stderr():
                    prof.__enter__()
            sampler = CudaSampler(blocks_of(model), rank) if last and cuda else None
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            if prof is not None:
                with quiet_stderr():
                    prof.__exit__(None, None, None)
                trace = profile_to_trace(prof, rank)
            if sampler is not None:
                trace = sampler.close(trace or Trace("measured", meta={"rank": rank}))
            losses.append(loss.item())
            if last and cuda:
                torch.cuda.synchronize()
                cuda_stats = {"allocated_before_step": before,
                              "peak_allocated": torch.cuda.max_memory_allocated(),
                              "allocated_after_step": torch.cuda.memory_allocated()}
        full = {n: p.full_tensor().detach().cpu()  # type: ignore[attr-defined]
                for n, p in model.named_parameters()}
        out[name] = {
            "losses": losses,
            "local": measure_shards(model, opt, padded=False),
            "padded": measure_shards(model, opt, padded=True),
            "predicted_local": fsdp_rank_bytes(shapes, world_size, rank),
            "predicted_padded": fsdp_rank_bytes(shapes, world_size, rank, padded=True),
            "params": full if rank == 0 else None,
            "trace": trace.to_dict() if trace is not None else None,
            "cuda": cuda_stats,
            "device": str(device),
        }
    return out


@dataclass
class FSDPRun:
    """What a real FSDP2 run measured, per rank, next to dpsim's prediction (bytes)."""

    model: str
    world_size: int
    device: str
    losses: list[float]  # mean loss over the global batch, per step
    measured: list[MemoryBreakdown]  # per rank: local shards (unpadded)
    measured_padded: list[MemoryBreakdown]  # per rank: storage allocated (padding included)
    predicted: list[MemoryBreakdown]
    predicted_padded: list[MemoryBreakdown]
    params: dict[str, torch.Tensor]  # full parameters after training (gathered on rank 0)
    trace: Trace | None  # measured timeline of the last step, all ranks
    cuda: list[dict[str, int] | None] = field(default_factory=list)
    single_params: dict[str, torch.Tensor] | None = None
    single_losses: list[float] | None = None

    @property
    def matches_prediction(self) -> bool:
        """True when every rank's measured bytes equal the prediction, padded and not."""
        return self.measured == self.predicted and self.measured_padded == self.predicted_padded

    @property
    def max_abs_diff(self) -> float:
        """Largest |FSDP - one process| over every parameter element (nan if not compared)."""
        if self.single_params is None:
            return float("nan")
        return max(float((self.params[n] - p).abs().max()) for n, p in self.single_params.items())

    def table(self) -> list[dict[str, object]]:
        """One row per rank: measured and predicted model-state bytes."""
        return [{"rank": r, "params_B": m.parameters, "grads_B": m.gradients,
                 "optimizer_B": m.optimizer, "padded_params_B": mp.parameters,
                 "padded_grads_B": mp.gradients, "predicted_equal": m == p and mp == pp}
                for r, (m, mp, p, pp) in enumerate(zip(
                    self.measured, self.measured_padded, self.predicted, self.predicted_padded,
                    strict=True))]


def run_fsdp_models(world_size: int = 2, models: tuple[str, ...] = ("mlp",), *, steps: int = 3,
                    batch_size: int = 4, lr: float = 1e-2, seed: int = 0,
                    mesh_size: int | None = None, record: bool = True,
                    compare_single: bool = True, backend: str = "auto",
                    timeout_s: float = 120.0) -> dict[str, FSDPRun]:
    """Launch `world_size` ranks once and train every model in `models` with FSDP2."""
    from dpsim.runtime.launch import launch

    check_mesh(world_size, mesh_size)
    require_int("steps", steps, 1, 10_000)
    require_int("batch_size", batch_size, 1, 1 << 16)
    require_range("lr", lr, 0, low_inclusive=False)
    for name in models:
        require_choice("model", name, MODELS)
    ranks = launch(fsdp_rank, world_size, args=(tuple(models), steps, batch_size, lr, seed,
                                                mesh_size, record),
                   backend=backend, timeout_s=timeout_s)
    runs: dict[str, FSDPRun] = {}
    for name in models:
        per = [r[name] for r in ranks]
        traces = [Trace.from_dict(p["trace"]) for p in per if p["trace"] is not None]
        trace = None
        if traces:
            trace = Trace("measured", [e for t in traces for e in t.events],
                          [m for t in traces for m in t.memory],
                          meta={"strategy": "fsdp", "model": name, "world_size": world_size,
                                "aligned": "each rank's times start at its own first event"})
        losses = [sum(p["losses"][s] for p in per) / world_size for s in range(steps)]
        run = FSDPRun(name, world_size, per[0]["device"], losses,
                      [p["local"] for p in per], [p["padded"] for p in per],
                      [p["predicted_local"] for p in per], [p["predicted_padded"] for p in per],
                      per[0]["params"], trace, [p["cuda"] for p in per])
        if compare_single:
            run.single_params, run.single_losses = train_one_process(
                name, steps, batch_size * world_size, lr, seed)
        runs[name] = run
    return runs


def run_fsdp(world_size: int = 2, model: str = "mlp", **kwargs: Any) -> FSDPRun:
    """Train one model with FSDP2 on `world_size` ranks (see run_fsdp_models for options)."""
    return run_fsdp_models(world_size, (model,), **kwargs)[model]
