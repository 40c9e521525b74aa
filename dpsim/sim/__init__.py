"""The simulator: torch-free and deterministic (hardware, workload, trace, cost models,
collectives, strategies behind one registry, planner, fidelity against published numbers).
"""
