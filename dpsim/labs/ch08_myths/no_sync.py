"""`no_sync` by a small real run on every rank: gradient accumulation without an
all-reduce per micro-batch (notebooks/08_myths_lab.ipynb's evidence, run by `myths_lab`).

Chapter 5 (notebooks/05_ddp.ipynb) writes its option demonstrations (`no_sync`,
`find_unused_parameters`, `static_graph`, buffer sync, `gradient_as_bucket_view`) in its
own cells.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dpsim.runtime.models import mlp


def _ddp(module: nn.Module, **kwargs: Any) -> Any:
    from torch.nn.parallel import DistributedDataParallel as DDP

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
