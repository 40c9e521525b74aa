"""dpsim: simulate, measure and see data-parallel training in PyTorch.

Three wings and a myths lab (docs/architecture.md draws them):

- the simulator, pure and deterministic, never imports torch: `dpsim.sim.validation`,
  `hardware`, `workload`, `trace`, `memory`, `compute`, `collectives`, `gil`,
  `strategies`, `planner`;
- real runs on `torch.distributed` process groups: `dpsim.runtime`;
- the course: `dpsim.course` (catalogue, doctor, lab, session, exercises, grader, grading);
  a learner's notebook imports `from dpsim.grading import check`;
- `dpsim.myths`, the claims lab; `dpsim.viz` draws, `dpsim.widgets` wires controls.

Submodules are imported on use so that `import dpsim` stays fast.
"""

__version__ = "0.1.0"
