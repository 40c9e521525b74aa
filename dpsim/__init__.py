"""dpsim: simulate, measure and see data-parallel training in PyTorch.

The wings (docs/architecture.md draws them):

- `dpsim.sim`, the simulator: pure and deterministic, never imports torch (hardware,
  workload, trace, cost models, collectives, strategies, planner, fidelity);
- `dpsim.runtime`, infrastructure for real runs on `torch.distributed` process groups (the
  launcher, machine, probes, models, recorders);
- `dpsim.labs`, what one chapter runs for real that is not itself the lesson;
- `dpsim.viz` draws, `dpsim.widgets` wires controls, `dpsim.myths` is the claims lab,
  `dpsim.reports` writes the validation report (`python -m dpsim validate`);
- `dpsim.course`: catalogue, doctor, lab, session, the grading engine and the exercises;
  a learner's notebook imports `from dpsim.grading import check`.

Submodules are imported on use so that `import dpsim` stays fast.
"""

__version__ = "0.1.0"
