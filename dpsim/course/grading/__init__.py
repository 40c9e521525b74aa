"""Graded exercises: `check("N.M", fn)` in a notebook cell prints `PASS N.M (k/k)` or says why not.

How a chapter adds exercises
----------------------------
1. Write `dpsim/grading/chNN.py` (found automatically: any module named `ch` + digits).
   For each exercise, decorate a function that takes a seeded `random.Random` and yields
   `Case`s: the input in words (`label`), the arguments, the right answer (from the
   dpsim library and, where possible, from real tensors), and the answers typical
   mistakes give (`mistakes`: hint -> wrong answer), so a wrong answer gets a useful
   hint. torch's RNG is seeded too (and restored afterwards), so cases are the same on
   every run. Never put the expected value in a label or hint::

       import random
       from collections.abc import Iterator
       from dpsim.course.grading.core import Case, exercise

       @exercise("2.1", function="shard_sizes", title="Split a batch", points=1)
       def _shard_sizes_cases(rng: random.Random) -> Iterator[Case]:
           for _ in range(3):
               batch, n = rng.randint(1, 100), rng.randint(2, 8)
               right = [batch // n + (r < batch % n) for r in range(n)]
               yield Case(f"batch_size={batch}, n_devices={n}", args=(batch, n),
                          expected=right,
                          mistakes={"you dropped the remainder": [batch // n] * n})

   `Case(rel_tol=...)` compares floats loosely; `Case(call=lambda fn: ...)` runs the
   learner's function some other way (e.g. through `dpsim.runtime.launch`).
2. In `solutions/NN_topic.ipynb`: the function the learner writes, with the answer between
   `### BEGIN SOLUTION` and `### END SOLUTION` lines, then a graded cell::

       # NBVAL_CHECK_OUTPUT
       from dpsim.course.grading import check
       check("2.1", shard_sizes)

   and run `python -m dpsim notebooks refresh solutions/NN_topic.ipynb` (stores the PASS
   line) and `python -m dpsim exercises build` (writes exercises/NN_topic.ipynb).
3. In `tests/test_grading_chNN.py`: feed deliberately wrong functions to every check.

`python -m dpsim grade` re-runs these checks in a clean process on the functions it finds
in a student's executed notebook, so nothing printed or patched in the notebook counts.
"""

from dpsim.course.grading.core import (
    Case,
    CheckResult,
    Exercise,
    ExerciseFailed,
    all_exercises,
    chapter_exercises,
    check,
    exercise,
    get_exercise,
    run_check,
)

__all__ = [
    "Case",
    "CheckResult",
    "Exercise",
    "ExerciseFailed",
    "all_exercises",
    "chapter_exercises",
    "check",
    "exercise",
    "get_exercise",
    "run_check",
]
