"""Run code on real `torch.distributed` process groups (see `dpsim.runtime.launch`).

Submodules are imported on use; this package imports nothing heavy.
"""
