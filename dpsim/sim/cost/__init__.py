"""Cost models every strategy shares: compute time, memory per category, precision policies,
ZeRO partitions, FSDP shards, the GIL, and compute/communication contention on a CPU host.
"""
