"""Chapter 5 (notebooks/05_ddp.ipynb): what its real runs use that is not the lesson: the
model and data builders, the comm-hook recording's launch and its prediction. The training
loop and DDP's options are written in the notebook's cells.
"""
