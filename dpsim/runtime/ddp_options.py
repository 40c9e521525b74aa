"""Four DDP options, each shown by a small real run on every rank.

* `no_sync`: gradient accumulation without an all-reduce per micro-batch;
* `find_unused_parameters`: a parameter that forward does not use;
* `broadcast_buffers`: BatchNorm running statistics kept equal to rank 0's;
* `gradient_as_bucket_view`: gradients that live inside the buckets (no copy).

`options_rank` runs all four inside one process group (one launch instead of four);
`ddp_options` launches it and returns rank 0's findings plus what the ranks compared.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dpsim.runtime.models import mlp


def _ddp(module: nn.Module, **kwargs: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel as DDP

    with warnings.catch_warnings():  # PyTorch 2.13 renames broadcast_buffers (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return DDP(module, **kwargs)


def _counting_hook(counter: list[int]) -> Any:
    """A comm hook that counts its calls and all-reduces like DDP's default."""

    def hook(state: object, bucket):  # type: ignore[no-untyped-def]  # DDP reads annotations
        counter[0] += 1
        buffer = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda f: f.value()[0])

    return hook


def _batch(rank: int, n: int = 8, features: int = 16, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed + 100 * rank)  # each rank its own data
    return torch.randn(n, features, generator=g), torch.randint(0, 4, (n,), generator=g)


def no_sync_demo(rank: int, micro_batches: int = 4) -> dict[str, Any]:
    """Accumulate gradients over micro-batches with and without no_sync; count all-reduces."""
    out: dict[str, Any] = {"micro_batches": micro_batches}
    grads = {}
    for use_no_sync in (False, True):
        counter = [0]
        ddp = _ddp(mlp(16, 32, 2, 4, seed=1))
        ddp.register_comm_hook(None, _counting_hook(counter))
        for m in range(micro_batches):
            x, y = _batch(rank, seed=m)
            last = m == micro_batches - 1
            if use_no_sync and not last:
                with ddp.no_sync():  # gradients accumulate locally, no all-reduce
                    nn.functional.cross_entropy(ddp(x), y).backward()
            else:
                nn.functional.cross_entropy(ddp(x), y).backward()
        key = "with_no_sync" if use_no_sync else "without_no_sync"
        out[f"all_reduce_calls_{key}"] = counter[0]
        grads[key] = torch.cat([p.grad.flatten() for p in ddp.parameters()])
    out["max_grad_difference"] = float((grads["with_no_sync"] - grads["without_no_sync"])
                                       .abs().max())
    return out


class TwoHeads(nn.Module):
    """A trunk and two heads; forward uses only head `a`, so head `b` gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.trunk = nn.Linear(16, 16)
        self.head_a = nn.Linear(16, 4)
        self.head_b = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits from head a."""
        return self.head_a(torch.relu(self.trunk(x)))


def find_unused_demo(rank: int, steps: int = 3) -> dict[str, Any]:
    """Train TwoHeads without, then with, find_unused_parameters=True."""
    out: dict[str, Any] = {}
    for flag in (False, True):
        ddp = _ddp(TwoHeads(), find_unused_parameters=flag)
        done, error = 0, ""
        try:
            for step in range(steps):
                x, y = _batch(rank, seed=step)
                nn.functional.cross_entropy(ddp(x), y).backward()
                done += 1
        except RuntimeError as exc:
            error = str(exc).strip().split(". ")[0] + "."
        out[f"steps_done_find_unused_{flag}"] = done
        out[f"error_find_unused_{flag}"] = error
    return out


def broadcast_buffers_demo(rank: int, steps: int = 3) -> dict[str, Any]:
    """BatchNorm running means after training then one eval forward, per setting."""
    out: dict[str, Any] = {}
    for flag in (True, False):
        torch.manual_seed(3)
        model = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
        ddp = _ddp(model, broadcast_buffers=flag)
        for step in range(steps):
            x, y = _batch(rank, seed=step)
            nn.functional.cross_entropy(ddp(x), y).backward()
        ddp.eval()
        with torch.no_grad():  # forward broadcasts rank 0's buffers first when flag is True
            ddp(_batch(rank, seed=99)[0])
        norm = model[1]
        assert isinstance(norm, nn.BatchNorm1d)
        assert norm.running_mean is not None
        mean = norm.running_mean.clone()
        everyone = [torch.empty_like(mean) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, mean)
        out[f"buffer_spread_broadcast_{flag}"] = float(
            max((m - everyone[0]).abs().max() for m in everyone))
    return out


def bucket_view_demo(rank: int, steps: int = 2) -> dict[str, Any]:
    """How many separate storages hold the gradients, with and without bucket views."""
    out: dict[str, Any] = {}
    for flag in (False, True):
        ddp = _ddp(mlp(16, 32, 2, 4, seed=4), gradient_as_bucket_view=flag,
                   bucket_cap_mb=0.002)  # ~2 KiB buckets: several of them
        for step in range(steps):
            x, y = _batch(rank, seed=step)
            nn.functional.cross_entropy(ddp(x), y).backward()
        grads = [p.grad for p in ddp.parameters() if p.grad is not None]
        storages = {g.untyped_storage().data_ptr() for g in grads}
        out[f"grad_tensors_view_{flag}"] = len(grads)
        out[f"grad_storages_view_{flag}"] = len(storages)
        out[f"grad_bytes_view_{flag}"] = sum(g.numel() * g.element_size() for g in grads)
    out["n_buckets"] = out["grad_storages_view_True"]
    return out


def options_rank(rank: int, world_size: int) -> dict[str, Any]:
    """Run the four demonstrations on this rank; return what it saw."""
    result: dict[str, Any] = {"rank": rank, "world_size": world_size}
    result["no_sync"] = no_sync_demo(rank)
    result["find_unused_parameters"] = find_unused_demo(rank)
    result["broadcast_buffers"] = broadcast_buffers_demo(rank)
    result["gradient_as_bucket_view"] = bucket_view_demo(rank)
    return result


def ddp_options(world_size: int = 2, *, timeout_s: float = 120.0) -> dict[str, Any]:
    """Launch `options_rank` on `world_size` gloo ranks; rank 0's findings."""
    from dpsim.runtime.launch import launch

    results = launch(options_rank, world_size, backend="gloo", timeout_s=timeout_s)
    return dict(results[0])
