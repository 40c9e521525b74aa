"""The graded exercises' content, one module per chapter (`chNN.py`) and its topic modules
(`chNN_<topic>.py`).

Each module registers its exercises with `dpsim.course.grading.registry.exercise`; the
registry discovers every module named `chNN` or `chNN_<topic>` as chapter NN's, and the
grading engine (`dpsim.course.grading`) knows nothing of any one exercise.
"""
