"""Chapter 5 (notebooks/05_ddp.ipynb): DDP per rank, the comm-hook recorder's launch, DDP's
options.
"""
