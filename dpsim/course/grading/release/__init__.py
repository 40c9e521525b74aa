"""The student's kit: `python -m dpsim course release OUT` (`kit.main`).

A course has two kits. The instructor's (this repository) holds the answer key:
`dpsim/course/exercises/`, whose case makers compute the right answers, and the grader that
makes each student's hidden cases. The student's kit (`kit.build`) holds the notebooks, dpsim
without the key, the public cases as stored data (`stored_cases`) and copies of only the
harnesses those cases run (`harness`).
"""

from dpsim.course.grading.release.kit import Release, build, main

__all__ = ["Release", "build", "main"]
