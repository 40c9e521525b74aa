"""Chapter 9 (notebooks/09_precision_and_memory.ipynb): autocast, FSDP2 mixed precision,
activation checkpointing, gradient clipping, CPU offload.
"""
