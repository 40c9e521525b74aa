"""Checking a learner's function against a registered exercise, and the check graded cells run.

`check(exercise_id, fn)` calls the learner's `fn` on every case of the exercise (see
`registry`) and prints one line `PASS 1.2 (3/3)`, or raises `ExerciseFailed` saying which
input failed and what kind of mistake it looks like (never the expected value). Cases are
built in this process; only their inputs reach the learner's function (in a sandbox process
inside a notebook, see `sandbox`), and only plain data comes back to be compared (`plain`,
`compare`). See the package docstring for the pattern a chapter follows.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpsim.course.grading.compare import first_difference, hint, preview, same
from dpsim.course.grading.plain import decode
from dpsim.course.grading.registry import Case, Exercise, get_exercise, student_seed
from dpsim.course.grading.reply import CaseCall, Reply
from dpsim.course.grading.sandbox import Sandbox, shared
from dpsim.course.grading.sandbox_worker import outcome, tripwires


class ExerciseFailed(AssertionError):
    """The learner's function gave a wrong answer, raised, or is still a stub."""


class GraderError(RuntimeError):
    """The grader itself failed (building cases, the sandbox): never the learner's zero."""


@dataclass(frozen=True)
class CheckResult:
    """Outcome of checking one function against one exercise."""

    exercise_id: str
    passed: int  # cases answered right
    total: int
    message: str | None = None  # why it failed; None when every case passed
    expected: Any = None  # right answer of the first failed case (never shown to the learner)
    failed_label: str | None = None  # input of the first failed case

    @property
    def ok(self) -> bool:
        """True when every case passed."""
        return self.message is None and self.passed == self.total


RANKS_TIMEOUT_S = 180.0  # one launch of a learner's ranks (`ranks.run_specs`), seconds
REPORT_ROOM_S = 30.0  # after that launch's limit: stopping its ranks, reading their stacks
# One exercise's cases in the sandbox: longer than a launch's limit, so that a hung launch
# is stopped by `launch` itself, which says where each rank was, before the check is killed.
CHECK_TIMEOUT_S = RANKS_TIMEOUT_S + REPORT_ROOM_S
TODO = ("Exercise {id} is not done yet: replace the `raise NotImplementedError` line in "
        "`{function}` with your code, then run this cell again.")


def _in_process(fn: Callable[..., Any], ex: Exercise, cases: list[Case]) -> Reply:
    """Run the cases here (trusted callers: tests, scripts), through the same plain-data
    path as the sandbox, so both judge the same answers."""
    reply = Reply()
    with tripwires(ex.forbidden) as tripped:
        for index, case in enumerate(cases):
            reply.outcomes[index] = decode(outcome(index, fn, case.call, case.args,
                                                   case.kwargs, tripped))
    return reply


def _calls(cases: list[Case]) -> list[CaseCall]:
    return [(case.call, tuple(case.args), dict(case.kwargs)) for case in cases]


def judge(ex: Exercise, cases: list[Case], reply: Reply, timeout_s: float) -> CheckResult:
    """Compare a sandbox reply (plain answers) with the cases' expected values."""
    head = f"Exercise {ex.exercise_id} ({ex.title})"
    total = len(cases)
    if reply.ended == "server":
        raise GraderError(f"the checking process failed: {reply.detail}")
    if reply.load_error is not None:
        return CheckResult(ex.exercise_id, 0, total, f"{head}: your function could not be "
                           f"loaded in the checking process: {reply.load_error}")
    passed, first = 0, None
    for index, case in enumerate(cases):
        where = f"case {index + 1} of {total}:\n  input: {case.label}"
        row = reply.outcomes.get(index)
        if row is None:
            why = {"timeout": f"the check took longer than {timeout_s:g} s",
                   "oversize": "your answer is too large to check",
                   "exit": f"your function ended the checking process ({reply.detail})"
                   }.get(reply.ended, "your function ended the checking process")
            first = first or (f"{head} failed on {where}\n  {why}", case)
            break
        if "forbidden" in row:
            message = (f"this exercise asks you to write it yourself, not to call "
                       f"{row['forbidden']}")
            first = first or (f"{head} failed on {where}\n  {message}", case)
        elif "error" in row:
            if row.get("stub"):
                todo = TODO.format(id=ex.exercise_id, function=ex.function)
                return CheckResult(ex.exercise_id, 0, total, todo, case.expected, case.label)
            first = first or (f"{head} failed on {where}\n  your function raised "
                              f"{row['error']}{row.get('where', '')}", case)
        elif same(row.get("answer"), case.expected, *ex.tolerance(case)):
            passed += 1
        elif first is None:
            first = (f"{head} failed on {where}\n{_feedback(ex, case, row.get('answer'))}", case)
    if first is None:
        return CheckResult(ex.exercise_id, passed, total)
    message = f"{first[0]}\n  ({passed} of {total} cases passed)"
    return CheckResult(ex.exercise_id, passed, total, message, first[1].expected, first[1].label)


def _feedback(ex: Exercise, case: Case, answer: object) -> str:
    """The lines for a wrong answer: where it first differs (a structured answer), the
    answer cut to ~300 characters, and the hint."""
    rel_tol, abs_tol = ex.tolerance(case)
    try:
        words = case.explain(answer) if case.explain is not None else None
    except Exception:  # an explain written for honest answers meeting an odd one
        words = None
    words = words or hint(answer, case.expected, case.mistakes, rel_tol, abs_tol)
    where = first_difference(answer, case.expected, rel_tol, abs_tol)
    lines = [f"  {where}"] if where else []
    lines += [f"  your answer: {preview(answer)}", f"  hint: {words}"]
    return "\n".join(lines)


def check_blob(exercise_id: str, blob: bytes, sandbox: Sandbox, seed: int | None = None,
               timeout_s: float = CHECK_TIMEOUT_S) -> CheckResult:
    """Check a learner's function given as dill bytes; it is unpickled in the sandbox only.
    GraderError when the cases cannot be built or the sandbox itself fails."""
    ex = get_exercise(exercise_id)
    try:
        cases = ex.cases(seed)
    except Exception as exc:
        raise GraderError(f"building the cases of {exercise_id} failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    reply = sandbox.run(blob, ex.forbidden, _calls(cases), timeout_s)
    return judge(ex, cases, reply, timeout_s)


def run_check(exercise_id: str, fn: Callable[..., Any], seed: int | None = None,
              sandbox: Sandbox | None = None, timeout_s: float = CHECK_TIMEOUT_S
              ) -> CheckResult:
    """Try `fn` on every case of the exercise; never raises for the learner's mistakes.

    `sandbox=None` runs `fn` in this process (tests); a `sandbox.Sandbox` runs it there.
    """
    ex = get_exercise(exercise_id)
    head = f"Exercise {ex.exercise_id} ({ex.title})"
    if not callable(fn):
        return CheckResult(ex.exercise_id, 0, 0,
                           f"{head}: check() needs your function `{ex.function}`, "
                           f"got a {type(fn).__name__}")
    if sandbox is None:
        cases = ex.cases(seed)
        return judge(ex, cases, _in_process(fn, ex, cases), timeout_s)
    from dpsim.runtime.launch.pickling import dumps

    try:
        blob = dumps(fn)
    except Exception as exc:
        return CheckResult(ex.exercise_id, 0, len(ex.cases(seed)),
                           f"{head}: your function cannot be sent to the checking process "
                           f"(the grader could not either): {type(exc).__name__}: {exc}")
    return check_blob(exercise_id, blob, sandbox, seed, timeout_s)


def use_sandbox() -> bool:
    """Sandbox inside a Jupyter kernel (or DPSIM_CHECK_SANDBOX=1); in-process elsewhere."""
    choice = os.environ.get("DPSIM_CHECK_SANDBOX", "")
    if choice in ("0", "1"):
        return choice == "1"
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def check(exercise_id: str, fn: Callable[..., Any]) -> None:
    """Print `PASS N.M (k/k)` if `fn` answers every case right, else raise ExerciseFailed.

    In a notebook the cases run in the sandbox, as the grader runs them; `DPSIM_STUDENT`
    (if set) picks the student's own cases, as the grader does (see the package docstring).
    """
    student = os.environ.get("DPSIM_STUDENT")
    seed = student_seed(student) if student else None
    if use_sandbox():
        result = run_check(exercise_id, fn, seed=seed, sandbox=shared())
    else:
        result = run_check(exercise_id, fn, seed=seed)
    if not result.ok:
        raise ExerciseFailed(result.message)
    print(f"PASS {result.exercise_id} ({result.passed}/{result.total})")
