"""Four DDP options, each shown by a small real run on every rank.

* `no_sync`: gradient accumulation without an all-reduce per micro-batch;
* `find_unused_parameters`: a parameter that forward does not use;
* buffer sync (`forward_sync_buffers`, formerly `broadcast_buffers`): BatchNorm running
  statistics copied from rank 0 at every forward; the deprecated `broadcast_buffers=False`
  also skips the copy at construction, `forward_sync_buffers=False` does not;
* `gradient_as_bucket_view`: gradients that live inside the buckets (no copy).

`options_rank` runs all four inside one process group (one launch instead of four);
`ddp_options` launches it and returns rank 0's findings plus what the ranks compared.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dpsim.runtime.models import mlp


def has_forward_sync_buffers() -> bool:
    """True when this torch's DDP takes `forward_sync_buffers` (the new name)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    return "forward_sync_buffers" in inspect.signature(DDP.__init__).parameters


def _ddp(module: nn.Module, **kwargs: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(module, **kwargs)


def _sync_kwargs(forward_sync: bool) -> dict[str, bool]:
    """Buffer sync at every forward, under the name this torch uses."""
    name = "forward_sync_buffers" if has_forward_sync_buffers() else "broadcast_buffers"
    return {name: forward_sync}


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
    """Accumulate gradients over micro-batches with and without no_sync; count all-reduces.

    Each micro-batch's loss is divided by `micro_batches`, so that the accumulated gradient
    is the gradient of the mean loss over the k-times batch; the same model is also run
    once on that k-times batch (one backward) to compare. Unscaled losses would give k
    times that gradient.
    """
    out: dict[str, Any] = {"micro_batches": micro_batches}
    grads = {}
    for use_no_sync in (False, True):
        counter = [0]
        ddp = _ddp(mlp(16, 32, 2, 4, seed=1))
        ddp.register_comm_hook(None, _counting_hook(counter))
        for m in range(micro_batches):
            x, y = _batch(rank, seed=m)
            last = m == micro_batches - 1
            loss_fn = nn.functional.cross_entropy
            if use_no_sync and not last:
                with ddp.no_sync():  # gradients accumulate locally, no all-reduce
                    (loss_fn(ddp(x), y) / micro_batches).backward()
            else:
                (loss_fn(ddp(x), y) / micro_batches).backward()
        key = "with_no_sync" if use_no_sync else "without_no_sync"
        out[f"all_reduce_calls_{key}"] = counter[0]
        grads[key] = torch.cat([p.grad.flatten() for p in ddp.parameters()])
    big = _ddp(mlp(16, 32, 2, 4, seed=1))  # one backward over the k-times batch
    xs, ys = zip(*(_batch(rank, seed=m) for m in range(micro_batches)), strict=True)
    nn.functional.cross_entropy(big(torch.cat(xs)), torch.cat(ys)).backward()
    grads["big_batch"] = torch.cat([p.grad.flatten() for p in big.parameters()])
    out["max_grad_difference"] = float((grads["with_no_sync"] - grads["without_no_sync"])
                                       .abs().max())
    out["max_grad_difference_vs_big_batch"] = float(
        (grads["with_no_sync"] - grads["big_batch"]).abs().max())
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


def _running_mean_spread(norm: nn.BatchNorm1d) -> float:
    """Largest difference between any rank's BatchNorm running mean and rank 0's."""
    assert norm.running_mean is not None
    mean = norm.running_mean.clone()
    everyone = [torch.empty_like(mean) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mean)
    return float(max((m - everyone[0]).abs().max() for m in everyone))


def _bn_model(rank: int) -> tuple[nn.Sequential, nn.BatchNorm1d]:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    norm = model[1]
    assert isinstance(norm, nn.BatchNorm1d)
    assert norm.running_mean is not None
    norm.running_mean.fill_(float(rank))  # buffers differ between ranks before wrapping
    return model, norm


def broadcast_buffers_demo(rank: int, steps: int = 3) -> dict[str, Any]:
    """BatchNorm running means: right after wrapping, and after training + one eval forward.

    `buffer_spread_broadcast_{True,False}`: forward sync on / off (under the new name,
    `forward_sync_buffers`, where torch has it). `buffer_spread_at_wrap_*`: rank 0's
    buffers are copied at construction for `forward_sync_buffers=False`, but not for the
    deprecated `broadcast_buffers=False`, whose FutureWarning is recorded, not silenced.
    """
    out: dict[str, Any] = {"forward_sync_buffers_available": has_forward_sync_buffers()}
    for flag in (True, False):
        model, norm = _bn_model(rank)
        ddp = _ddp(model, **_sync_kwargs(flag))
        if not flag:
            out["buffer_spread_at_wrap_forward_sync_False"] = _running_mean_spread(norm)
        for step in range(steps):
            x, y = _batch(rank, seed=step)
            nn.functional.cross_entropy(ddp(x), y).backward()
        ddp.eval()
        with torch.no_grad():  # forward copies rank 0's buffers first when flag is True
            ddp(_batch(rank, seed=99)[0])
        out[f"buffer_spread_broadcast_{flag}"] = _running_mean_spread(norm)
    model, norm = _bn_model(rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _ddp(model, broadcast_buffers=False)  # the old name: no buffer copy at construction
    out["buffer_spread_at_wrap_broadcast_buffers_False"] = _running_mean_spread(norm)
    out["broadcast_buffers_warning"] = next(
        (str(w.message).split(".")[0] for w in caught if issubclass(w.category, FutureWarning)),
        "")
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
