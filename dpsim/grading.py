"""What a learner's notebook imports: `from dpsim.grading import check`.

Grading has one home, `dpsim.course.grading` (checking, building exercises/, grading
notebooks); this module is the learner's face of it: it gives `check` and, in a notebook,
starts the sandbox that `check()` runs the learner's functions in, so that its start-up
(importing torch) overlaps the learner's reading instead of the first check. In the
student's kit (`python -m dpsim course release`), which holds no answer key, `check` judges
the stored public cases (`course.grading.stored_cases`).
"""

from dpsim.course.grading import core, stored_cases
from dpsim.course.grading.core import use_sandbox

check = stored_cases.check if stored_cases.stored() else core.check

if use_sandbox():
    from dpsim.course.grading.sandbox import shared

    shared().start()

__all__ = ["check"]
