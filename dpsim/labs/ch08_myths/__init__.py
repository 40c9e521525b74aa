"""Chapter 8 (notebooks/08_myths_lab.ipynb): the real runs and torch-source facts the myths lab
judges on. What it shares with other chapters (FSDP2 builders and runs, the GIL measurements,
the real nn.DataParallel step) comes from `dpsim.runtime`.
"""
