"""Train a small model with DistributedDataParallel under torchrun (the notebook's code).

One machine, N processes (LO is the loopback interface: lo on Linux, lo0 on macOS):

    GLOO_SOCKET_IFNAME=LO torchrun --standalone --nproc_per_node=2 scripts/train_ddp.py

Two "nodes" on one machine (run each line in its own terminal; PORT is any free port):

    GLOO_SOCKET_IFNAME=LO torchrun --nnodes=2 --nproc_per_node=1 --node_rank=0 \\
        --rdzv-endpoint=127.0.0.1:PORT scripts/train_ddp.py
    GLOO_SOCKET_IFNAME=LO torchrun --nnodes=2 --nproc_per_node=1 --node_rank=1 \\
        --rdzv-endpoint=127.0.0.1:PORT scripts/train_ddp.py

`python -m dpsim.runtime.torchrun_commands` prints these lines for this machine, with its
loopback interface and a free port filled in.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every process;
the training itself is `dpsim.labs.ch05_ddp.ddp_train.train_rank`, the function the notebook
launches. Every rank prints its final checksum (the sum of |parameters|), equal on all.

A rank ends with `exit_without_teardown`, not with the interpreter's own teardown: the gloo
process group outlives `destroy_process_group` (importing torch._dynamo, which DDP does,
keeps references to it), so its worker threads are still alive when Python finalizes, and
one of them may still be freeing the last collective's work, whose saved thread-local state
holds a Python object (the contextvars.Context every backward pass stashes). Freeing it takes
the GIL; a thread that asks for the GIL while Python finalizes is ended with pthread_exit,
whose unwinding through that C++ destructor aborts the process ("terminate called without an
active exception", SIGABRT) after the rank has done all its work.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from dpsim.runtime.process_exit import exit_without_teardown


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options: a few steps of a tiny model by default."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per process")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--hidden", type=int, default=64, help="hidden width / channels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help="auto: nccl when every local process has a GPU, else gloo")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Join the process group torchrun prepared, train, print the checksum."""
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    from dpsim.labs.ch05_ddp.ddp_train import DDPRunConfig, train_rank
    from dpsim.runtime.launch import choose_backend

    if "RANK" not in os.environ:
        print("run me with torchrun (see the top of this file)", file=sys.stderr)
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # check=False: an explicit --backend nccl goes to torch unchecked; torch says what is missing.
    backend = choose_backend(args.backend, local_world, check=False)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend)  # reads the torchrun environment
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"world_size {world_size}, backend {backend}", flush=True)
    cfg = DDPRunConfig(model=args.model, hidden=args.hidden, batch_size=args.batch_size,
                       steps=args.steps, seed=args.seed, progress=False)
    run = train_rank(rank, world_size, cfg)
    print(f"rank {rank}/{world_size}: final loss {run.losses[-1]:.4f}, "
          f"checksum {run.checksum_final:.6f}", flush=True)
    dist.barrier()  # no rank tears its connections down while a peer still uses them
    dist.destroy_process_group()  # drops torch.distributed's references; gloo's threads live on
    return 0


if __name__ == "__main__":
    try:
        exit_code = main()
    except Exception:  # a failed rank: its traceback and exit code 1, as Python would
        traceback.print_exc()
        exit_code = 1
    exit_without_teardown(exit_code)
