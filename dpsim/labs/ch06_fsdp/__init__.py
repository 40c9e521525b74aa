"""Chapter 6 (notebooks/06_fsdp.ipynb): FSDP2 over a device mesh, meta-device init,
ZeroRedundancyOptimizer's state per rank.
"""
