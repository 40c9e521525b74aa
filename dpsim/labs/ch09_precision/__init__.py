"""Chapter 9 (notebooks/09_precision_and_memory.ipynb): autocast measured in one process,
activation checkpointing measured and predicted. FSDP2's mixed precision, clipping, meta-device
init, ZeRO-1 and CPU offload are written in the notebook's cells.
"""
