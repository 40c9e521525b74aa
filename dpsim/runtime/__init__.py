"""Infrastructure for real torch runs: the launcher (`launch`), this machine as dpsim hardware,
memory probes, workload capture, the models every chapter trains, synthetic data, and the
recorders that turn a run into a `Trace`.

What one chapter runs for real lives in `dpsim.labs`; nothing here imports it. Submodules are
imported on use; this package imports nothing heavy.
"""
