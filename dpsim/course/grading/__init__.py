"""Graded exercises, in one home: checking (`check("N.M", fn)` in a notebook cell prints
`PASS N.M (k/k)` or says why not), building exercises/ from solutions/ (`build`) and grading
students' notebooks (`grade`, `python -m dpsim grade`).

A notebook imports `check` from `dpsim.grading`, the learner's one-line face of this package
(it also starts the sandbox early in a notebook). The engine: `registry` (exercises and their
cases), `core` (running and judging a check), `reply` (what a run gives back to be judged),
`sandbox` and `sandbox_worker` (the process the learner's function runs in), `plain` and
`compare` (answers as plain data, compared totally), `ranks` (the one rank harness), and for
`grade`: `kernel`, `notebook_job`, `box` (the OS sandbox), `processes`, `trusted_copy` and
`results`.

How a chapter adds exercises
----------------------------
1. Write `dpsim/course/exercises/chNN.py` (found automatically: every module named `chNN`
   or `chNN_<topic>` belongs to chapter NN; `registry` imports them all on first use).
   For each exercise, decorate a function that takes a seeded `random.Random` and yields
   `Case`s: the input in words (`label`), the arguments, the right answer (from the
   dpsim library and, where possible, from real tensors), and the answers typical
   mistakes give (`mistakes`: hint -> wrong answer), so a wrong answer gets a useful
   hint. torch's RNG is seeded too (and restored afterwards), so cases are the same on
   every run. Never put the expected value in a label or hint::

       import random
       from collections.abc import Iterator
       from dpsim.course.grading.registry import Case, exercise

       @exercise("2.1", function="shard_sizes", title="Split a batch", points=1)
       def _shard_sizes_cases(rng: random.Random) -> Iterator[Case]:
           for _ in range(3):
               batch, n = rng.randint(1, 100), rng.randint(2, 8)
               right = [batch // n + (r < batch % n) for r in range(n)]
               yield Case(f"batch_size={batch}, n_devices={n}", args=(batch, n),
                          expected=right,
                          mistakes={"you dropped the remainder": [batch // n] * n})

   `Case(rel_tol=..., abs_tol=...)` compares floats loosely (an expected float always
   allows float32's rounding, 1e-6 relative; integers are exact). `Exercise(forbidden=...)`
   names dpsim functions that answer the exercise: in the sandbox each is replaced by a
   tripwire before the learner's function runs, and calling one fails the case with "this
   exercise asks you to write it yourself, not to call <name>".

   The contract with the sandbox (how a check runs, see `core`, `sandbox`, `reply`):

   - Cases are built in the grader's process; only `args`/`kwargs` (plain data, tensors,
     modules: anything pickle carries) travel to the sandbox. `expected`, `mistakes`,
     `label` and `explain` never leave the grader's process.
   - `Case.call`, when set, must be a module-level function of a chapter module or of
     `dpsim.course.grading` (pickled by reference), called in the sandbox as
     `call(fn, *args, **kwargs)`.
     It may launch gloo ranks with `dpsim.runtime.launch`, may cache one launch for all
     cases of the exercise (keyed on the function object: all cases of one exercise run
     in one sandbox process), must not call a forbidden name itself, and returns plain
     data: numbers, strings, None, lists and dicts of those, tensors (sent as nested
     lists). Decide right or wrong in the grader, never in the harness: a harness runs
     beside the learner's code, which can change it. `ranks.run_specs` runs a harness on
     real gloo ranks, one launch for every case; see `ch05.run_average`, whose expected
     tensors the grader computes itself, and `ch02_ranks.run_on_ranks` (every message
     counted).
   - `Case.explain(answer)` (optional, runs in the grader on the plain answer) returns a
     hint, or None for the usual ones (`mistakes`, then "too large"/"too small").
   - Cases depend only on the seeded `rng` (and torch's seeded RNG): `Exercise.cases(seed)`
     gives each student its own cases (`student_seed`), the same at every re-grade.
     `cases()` (seed None) is what `check()` uses unless `DPSIM_STUDENT` is set.

2. In `solutions/NN_topic.ipynb`: the function the learner writes, with the answer between
   `### BEGIN SOLUTION` and `### END SOLUTION` lines, then a graded cell::

       # NBVAL_CHECK_OUTPUT
       from dpsim.grading import check
       check("2.1", shard_sizes)

   and run `python -m dpsim notebooks refresh solutions/NN_topic.ipynb` (stores the PASS
   line) and `python -m dpsim exercises build` (writes exercises/NN_topic.ipynb).
3. In `tests/course/test_grading_chNN.py`: run the right answers and feed deliberately wrong
   functions to every check (`tests/course/grading/test_grading_seeds.py` also runs every
   exercise's right answer and named mistakes for hundreds of student seeds).

In a notebook, `check()` runs the learner's function in the sandbox, as the grader does
(the first check starts the sandbox server, a few seconds; later ones answer in well under a
second); elsewhere (tests, scripts) it runs in the calling process, or in the sandbox with
`DPSIM_CHECK_SANDBOX=1`. `python -m dpsim grade` (`grade`) re-runs the checks on the
functions it finds in a student's notebook, so nothing printed or patched in the notebook
counts; README "For instructors" says what it defends against.
"""

from dpsim.course.grading.core import (
    CheckResult,
    ExerciseFailed,
    GraderError,
    check,
    run_check,
)
from dpsim.course.grading.registry import (
    Case,
    Exercise,
    all_exercises,
    chapter_exercises,
    exercise,
    get_exercise,
    student_seed,
)

__all__ = [
    "Case",
    "CheckResult",
    "Exercise",
    "ExerciseFailed",
    "GraderError",
    "all_exercises",
    "chapter_exercises",
    "check",
    "exercise",
    "get_exercise",
    "run_check",
    "student_seed",
]
