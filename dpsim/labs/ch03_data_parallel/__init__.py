"""Chapter 3 (notebooks/03_data_parallel.ipynb): DataParallel re-enacted on CPU threads, the
instrumented real nn.DataParallel, DP vs DDP batch semantics.
"""
