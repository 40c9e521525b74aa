"""Train under torchrun with checkpoints, and fail on purpose: the chapter-10 elastic run.

    GLOO_SOCKET_IFNAME=lo torchrun --standalone --nproc_per_node=2 --max-restarts=1 \\
        scripts/train_elastic.py --workdir /tmp/elastic --kill-at 5

Every rank resumes from `<workdir>/ckpt.pt` when it exists (model, optimizer, step), trains
a small DDP model to `--steps`, and rank 0 writes a checkpoint every `--ckpt-every` steps
(to a temporary name, then renamed, then a barrier). `--kill-at K`: in the first attempt
(TORCHELASTIC_RESTART_COUNT=0), rank 1 sends itself SIGKILL just before step K; torchrun
sees the worker die, stops the others and, with --max-restarts >= 1, starts them all again.
`--raise-at K`: rank 1 raises a ValueError at step K instead; `main` is wrapped in
torch.distributed.elastic's `@record`, which writes the traceback to the error file
torchrun reads to name the root cause. Every rank appends its events (start, resume, step,
checkpoint, killed, done; wall time) to `<workdir>/events.jsonl`; rank 0 saves the final
parameters to `<workdir>/final.pt`. The data of step s depends on s alone, so a resumed run
repeats exactly what the lost steps did.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import traceback
from datetime import timedelta

from torch.distributed.elastic.multiprocessing.errors import record

from dpsim.runtime.process_exit import exit_without_teardown


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="checkpoint, events and result")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--ckpt-every", type=int, default=2)
    parser.add_argument("--kill-at", type=int, default=-1, help="rank 1 SIGKILLs itself")
    parser.add_argument("--raise-at", type=int, default=-1, help="rank 1 raises ValueError")
    return parser.parse_args(argv)


def log(workdir: str, **event: object) -> None:
    """Append one event line (wall time added); short lines appended whole by O_APPEND."""
    with open(os.path.join(workdir, "events.jsonl"), "a") as f:
        f.write(json.dumps({"t": time.time(), **event}) + "\n")


@record
def main(argv: list[str] | None = None) -> int:
    """Join torchrun's process group, resume if a checkpoint exists, train, checkpoint."""
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from dpsim.runtime.models import mlp

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # a join or a collective that waits longer than this raises, so a stuck worker fails
    # (and torchrun restarts the job) instead of hanging it
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    model = mlp(in_features=8, hidden=16, depth=1, n_classes=3, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    path = os.path.join(args.workdir, "ckpt.pt")
    start = 0
    log(args.workdir, rank=rank, attempt=attempt, step=0, event="start", pid=os.getpid())
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"]) + 1
        log(args.workdir, rank=rank, attempt=attempt, step=start, event="resume")
    ddp = DDP(model)
    for step in range(start, args.steps):
        if rank == 1 and step == args.kill_at and attempt == 0:
            log(args.workdir, rank=rank, attempt=attempt, step=step, event="killed")
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == 1 and step == args.raise_at:
            raise ValueError(f"rank 1 found a bad batch at step {step}")
        g = torch.Generator().manual_seed(1000 * step + rank)  # the data of (step, rank)
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        time.sleep(0.05)  # a step that takes some time, so the timeline shows it
        log(args.workdir, rank=rank, attempt=attempt, step=step, event="step")
        if (step + 1) % args.ckpt_every == 0:
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
                log(args.workdir, rank=rank, attempt=attempt, step=step, event="checkpoint")
            dist.barrier()  # nobody goes on (or dies) believing a checkpoint not yet written
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
                   os.path.join(args.workdir, "final.pt"))
    log(args.workdir, rank=rank, attempt=attempt, step=args.steps, event="done")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        exit_code = main() or 0
    except Exception:  # @record wrote the error file; print the traceback as Python would
        traceback.print_exc()
        # torchrun names as root cause the error file with the earliest timestamp, in whole
        # seconds, and rank 0 on a tie; the peers fail as soon as this process exits, so stay
        # a little longer: their error files then carry a later second than this one
        time.sleep(1.5)
        exit_code = 1
    exit_without_teardown(exit_code)
