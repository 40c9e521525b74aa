"""What a learner's notebook imports: `from dpsim.grading import check`.

The graded checks live in `dpsim.course.grading`; this module only re-exports `check`.
"""

from dpsim.course.grading.core import check

__all__ = ["check"]
