"""The graded exercises' content, one module per chapter (`chNN.py`, with its topic modules).

Each module registers its exercises with `dpsim.course.grading.core.exercise`; the grading
engine (`dpsim.course.grading`) discovers them and knows nothing of any one exercise.
"""
