"""Collectives in the simulator: `cost` (alpha-beta time and traffic per algorithm),
`ring` (the ring all-reduce step by step), `schedule` (who sends what, when), `traffic`
(bytes per rank by formula), `series` (what the figures draw), `fit` (timings -> Link)
and `limits` (the ranges of ranks, bytes and links they accept).

Submodules are imported on use; import from them directly.
"""
