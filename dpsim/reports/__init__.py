"""The writers of `python -m dpsim validate`: the simulator's checks against published
measurements (`dpsim.sim.fidelity`) turned into files.

`validation` writes `benchmarks/results/validation.json`, `docs/validation.md` and
`docs/validation_figure.json`; `constants_block` writes the fitted block of
`dpsim/sim/collectives/link_constants.py` (`--write-constants`); the `*_section` modules
write the markdown sections of the FSDP and ResNet-50 checks. The simulator itself reads
and fits; it writes no file.
"""
