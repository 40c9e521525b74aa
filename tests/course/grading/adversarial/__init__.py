"""Notebooks that try to cheat the grader, and notebooks with correct but unusual answers."""
