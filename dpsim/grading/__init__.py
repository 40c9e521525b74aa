"""Graded exercises: checks that graded notebook cells call."""
