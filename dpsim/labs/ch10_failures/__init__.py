"""Chapter 10 (notebooks/10_checkpoints_and_failures.ipynb): checkpoints (DDP, DCP resharding),
HSDP, elastic restarts, collective timeouts, Join and SyncBatchNorm.
"""
