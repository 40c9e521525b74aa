"""Chapter 3 (notebooks/03_data_parallel.ipynb): DataParallel re-enacted on CPU threads, and
the choice between it and the instrumented real nn.DataParallel (`runtime.dp_cuda_step`).
"""
