"""Whether a data-parallel step's communication can hide behind its compute on a CPU host.

Overlapping an all-reduce with backward hides it only if something else does the
communication's work. On a GPU the collective runs on its own stream and copy engines, so
the host cores are not the question. On a CPU host (gloo), each rank's collective runs on
a communication thread of the rank (ProcessGroupGloo's worker) that copies, sums and sends
the bucket on a core, beside the rank's intra-op compute threads. When the ranks' compute
threads already take every core, the communication thread takes its core from compute:
the all-reduce's time is added to the step instead of hidden. Measured on a 2-core
machine with 2 ranks of one thread each: an all-reduce issued beside a matmul loop ends
after about the loop's time plus the all-reduce's, not the longer of the two.

The decision is a count of threads against cores, nothing fitted.
"""

from __future__ import annotations

from typing import Annotated

from dpsim.sim.checks import Int, OneOf

DEVICE_KINDS = ("cpu", "gpu")
Cores = Annotated[int, Int(1, 1 << 16)]  # cores, ranks or threads of one host
COMM_THREADS_PER_RANK = 1  # the thread that runs a rank's collectives (gloo's worker)


def spare_cores(cores: int, ranks_per_host: int, threads_per_rank: int) -> int:
    """Cores left (possibly negative) once every rank's intra-op compute threads have one."""
    return cores - ranks_per_host * threads_per_rank


def comm_overlaps_compute(kind: Annotated[str, OneOf(DEVICE_KINDS)], cores: Cores,
                          ranks_per_host: Cores, threads_per_rank: Cores) -> bool:
    """True when a rank's communication can run beside its compute without slowing it.

    `kind`: the device kind ("gpu": always True; "cpu": True only when the host has a
    spare core for every rank's communication thread). `cores`: the host's usable CPU
    cores; `ranks_per_host`: ranks sharing them; `threads_per_rank`: each rank's intra-op
    threads (torch.get_num_threads()).
    """
    spare = spare_cores(cores, ranks_per_host, threads_per_rank)
    return kind == "gpu" or spare >= ranks_per_host * COMM_THREADS_PER_RANK
