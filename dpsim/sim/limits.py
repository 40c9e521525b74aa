"""Every bound the simulator puts on its inputs, in one place, and the hints that carry them.

Wide enough for any real machine or model, tight enough that every number the simulator
derives stays finite. A count a caller gives is at most `MAX_COUNT` (an int64, with
headroom); one a strategy's formula takes is at most `MAX_EXACT_COUNT` (exact as the float
it computes in). The hints at the end (`WorldSize`, `NBytes`, ...) put a bound into a
signature: `checks.checked` and `checks.check_fields` read them at the face.
"""

from __future__ import annotations

from typing import Annotated

from dpsim.sim.checks import Int, Real

GiB = 1024**3

# --- counts, bytes, times -------------------------------------------------------------------
MAX_COUNT = 2**62  # elements, parameters, bytes or tensors a caller gives: fits an int64
MAX_EXACT_COUNT = 1 << 53  # parameters or bytes in a strategy's formula: exact as a float
MAX_TOTAL_BYTES = 2**128  # a derived byte total: a count times a batch, times a few factors
MAX_SECONDS = 1e100  # a time in a trace: far beyond any step, and sums of them stay finite
MAX_BATCH = 1 << 24  # samples in one step (global or per device)

# --- hardware -------------------------------------------------------------------------------
MAX_MEMORY_GIB = 2**30  # memory_GiB: an exbibyte per device
MIN_RATE, MAX_RATE = 1e-6, 10**12  # TFLOP/s and GB/s: 1 MFLOP/s (1 kB/s) .. 1e24 FLOP/s (1 ZB/s)
MAX_OVERHEAD_US = 10**9  # op_overhead_us and latency_us: 1000 s per operator or message
MIN_EFFICIENCY = 1e-6  # fraction of peak reached; at most 1
MAX_DEVICES_PER_NODE, MAX_NODES = 1024, 4096
MAX_WORLD_SIZE = MAX_DEVICES_PER_NODE * MAX_NODES  # ranks: the largest dpsim Cluster
MAX_DEVICE = MAX_WORLD_SIZE - 1  # a rank or device index, 0..MAX_DEVICE
MAX_CORES = 4096  # CPU cores of a host (cpu_device) or of a GIL simulation
MAX_NICS_PER_NODE = 1024

# --- workloads ------------------------------------------------------------------------------
MAX_FLOPS = 1e30  # FLOPs of one layer's forward
MAX_LAYERS = 10_000
MAX_DIM = 1 << 20  # a hidden size, a sequence length, a vocabulary
MAX_NDIM = 64  # dimensions of a parameter's shape
MAX_TENSORS = 1 << 20  # parameter tensors one call partitions
MAX_DTYPE_BYTES = 16  # bytes of one element: fp64 complex; fp32 is 4, bf16 2
MAX_STATE_BYTES_PER_PARAM = 1024  # param, grad and optimizer bytes of the ZeRO calculator
MAX_OUT_FEATURES = 1 << 32  # a classifier's outputs per sample

# --- collectives ----------------------------------------------------------------------------
MAX_LISTED_RANKS = 1 << 16  # ranks in an answer with one entry per rank
MAX_SCHEDULE_RANKS = 1024  # ranks in a schedule built round by round (O(N**2) messages)
MAX_NBYTES = 1 << 46  # bytes of one collective's full tensor (64 TiB)
MAX_RING_RANKS = 32  # ranks in the step-by-step ring (ring.ring_all_reduce_steps)
MAX_RING_STORED = 1 << 23  # numbers its snapshots hold: (2N - 1) steps x N ranks x length
MIN_TIME_S, MAX_TIME_S = 1e-12, 1e6  # a measured timing: from a picosecond to 11.6 days
MAX_TERM = 2 * MAX_WORLD_SIZE  # the largest k or f of a closed form (naive all-reduce)

# --- strategies -----------------------------------------------------------------------------
MAX_BUCKET_CAP_MB = float(1 << 20)  # a DDP bucket cap: 1 TiB
MAX_HOST_US = 10_000.0  # DataParallel: 10 ms per operator, module copy or thread start
MAX_TRANSFERS = 1000.0  # model-sized transfers per step in a crossover formula
MAX_ALPHA_TERMS = 1 << 30  # latencies per step per extra device
MAX_COMPUTE_S = 1e6  # a compute time in the crossover formula (11.6 days)
MAX_PLANNER_DEVICES = 1024  # the planner's largest cluster (its sizes are 1, 2, 4 .. 1024)

# --- the GIL model --------------------------------------------------------------------------
MAX_THREADS = 1024  # threads in one simulation
MAX_CPU_S = 3600.0  # CPU seconds of one thread's work, or of one segment
MIN_SWITCH_INTERVAL_S = 1e-6  # CPython keeps the switch interval in whole microseconds
MAX_STEPS = 150_000  # estimated simulation steps x (threads + 10): under half a second

# --- the same bounds as type hints ----------------------------------------------------------
Count = Annotated[int, Int(0, MAX_COUNT)]
Samples = Annotated[int, Int(1, MAX_BATCH)]
WorldSize = Annotated[int, Int(1, MAX_WORLD_SIZE)]
ListedRanks = Annotated[int, Int(1, MAX_LISTED_RANKS)]
NBytes = Annotated[int, Int(0, MAX_NBYTES)]
DeviceIndex = Annotated[int, Int(0, MAX_DEVICE)]
TotalBytes = Annotated[int, Int(0, MAX_TOTAL_BYTES)]
Seconds = Annotated[float, Real(0, MAX_SECONDS)]
Fraction = Annotated[float, Real(0, 1)]
Rate = Annotated[float, Real(MIN_RATE, MAX_RATE)]  # TFLOP/s or GB/s of a Device or Link
Microseconds = Annotated[float, Real(0, MAX_OVERHEAD_US)]  # per operator or per message
