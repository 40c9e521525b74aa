"""dpsim: simulate, measure and see data-parallel training in PyTorch.

Submodules are imported on use so that `import dpsim` stays fast:
`dpsim.hardware`, `dpsim.workload`, `dpsim.trace`, `dpsim.memory`, `dpsim.strategies`,
`dpsim.collectives.cost`, `dpsim.runtime`, `dpsim.viz`, `dpsim.widgets`, `dpsim.course.grading`.
"""

__version__ = "0.1.0"
