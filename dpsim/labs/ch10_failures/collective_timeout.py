"""A hung collective, and the timeout that ends it.

Rank 1 skips an all-reduce that rank 0 enters: rank 0 waits for a partner that never
comes. Without a timeout it would wait forever (gloo's default is 30 minutes). Here the
all-reduce runs on a process group created with `timeout=timedelta(seconds=...)`, so gloo
gives up and raises on rank 0; `launch` reports the failed rank with its traceback and
stops every rank. (`launch(timeout_s=...)` is the second line of defence: it names the hung
rank and what it was doing, e.g. blocked in a collective, when nothing raises.)
"""

from __future__ import annotations

import time
from datetime import timedelta

from dpsim.sim import require_range


def skip_rank(rank: int, world_size: int, timeout_s: float) -> float:
    """Worker: every rank but 1 enters an all-reduce on a group with a timeout; return the
    seconds it waited (never reached on rank 0: the all-reduce raises)."""
    import torch
    import torch.distributed as dist

    group = dist.new_group(timeout=timedelta(seconds=timeout_s))
    started = time.monotonic()
    if rank != 1:
        dist.all_reduce(torch.ones(4), group=group)
    else:
        time.sleep(timeout_s + 3)  # rank 1 is elsewhere (a data loader stuck, a skipped step)
    return time.monotonic() - started


def run_hung_collective(timeout_s: float = 2.0) -> tuple[str, float]:
    """Launch 2 ranks where rank 1 skips an all-reduce; return the failure's message and the
    seconds until it surfaced (about `timeout_s` plus start-up)."""
    from dpsim.runtime.launch import RankFailedError, launch

    require_range("timeout_s", timeout_s, 0.5, 60)
    started = time.monotonic()
    try:
        launch(skip_rank, 2, args=(timeout_s,), backend="gloo", timeout_s=60 + timeout_s)
    except RankFailedError as err:
        return str(err), time.monotonic() - started
    raise RuntimeError("the all-reduce with a missing partner did not time out")
