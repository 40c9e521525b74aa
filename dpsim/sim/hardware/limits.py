"""The bounds of a hardware description, shared by `device`, `link` and `cluster`.

Wide enough for any real machine, tight enough that every time the simulator derives from
them (a count of at most `dpsim.sim.checks.MAX_COUNT` over a rate) stays finite.
"""

from __future__ import annotations

GiB = 1024**3

MAX_MEMORY_GIB = 2**30  # memory_GiB: an exbibyte per device
MIN_RATE, MAX_RATE = 1e-6, 10**12  # TFLOP/s and GB/s: 1 MFLOP/s (1 kB/s) .. 1e24 FLOP/s (1 ZB/s)
MAX_OVERHEAD_US = 10**9  # op_overhead_us and latency_us: 1000 s per operator or message
MIN_EFFICIENCY = 1e-6  # fraction of peak reached; at most 1
MAX_DEVICES_PER_NODE, MAX_NODES = 1024, 4096
MAX_WORLD_SIZE = MAX_DEVICES_PER_NODE * MAX_NODES
MAX_CORES = 1 << 16  # cpu_device(n_cores)
MAX_NICS_PER_NODE = 1024
