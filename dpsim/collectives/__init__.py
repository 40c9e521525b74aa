"""Collectives in the simulator: `cost` (alpha-beta time and traffic per algorithm),
`ring` (the ring all-reduce step by step) and `schedule` (who sends what, when).

Submodules are imported on use; import from them directly.
"""
