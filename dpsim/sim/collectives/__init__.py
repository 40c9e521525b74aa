"""Collectives in the simulator: `cost` (alpha-beta time and traffic per algorithm over one
link), `ring` (the ring all-reduce step by step), `schedule` (who sends what, when),
`traffic` (bytes per rank by formula), `series` (what the figures draw), `fit` (timings ->
Link), `limits` (the ranges of ranks, bytes and links they accept), and `nccl` with
`link_constants` (collectives as NCCL runs them on a topology of NVLink, NVSwitch and NICs,
every constant sourced).

Submodules are imported on use; import from them directly.
"""
