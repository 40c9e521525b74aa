"""Simulated strategies: simulate(workload, cluster, config) -> Trace (deterministic)."""
