"""Chapter 6 (notebooks/06_fsdp.ipynb): the models, data and shard measurements its real runs
use, FSDP2 runs for tests and chapters 8-10 (`fsdp_train`), meta-device init, and
ZeroRedundancyOptimizer's state per rank. The chapter writes its own `fully_shard` calls and
training loop in its cells.
"""
