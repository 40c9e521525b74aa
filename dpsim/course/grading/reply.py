"""What running a learner's function on an exercise's cases gives back to be judged.

The sandbox (`sandbox.Sandbox.run`) and the in-process path of trusted callers
(`core.run_check` with no sandbox) both fill one `Reply`: a `CaseOutcome` per case that ran,
read back from plain JSON (`plain.decode`), and how the run ended. `core.judge` compares it
with the cases' expected values, which never travel with it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

# what one case sends to the sandbox: (harness or None, args, kwargs)
CaseCall = tuple[Callable[..., Any] | None, tuple[Any, ...], dict[str, Any]]
# how the run ended: every case ran | its time ran out | the child exited early (detail: how)
# | an answer was too large | the sandbox itself failed (the grader's error, not the learner's)
Ended = Literal["done", "timeout", "exit", "oversize", "server"]


class CaseOutcome(TypedDict, total=False):
    """One case's outcome, as `sandbox_worker.outcome` writes it: `i` and exactly one of
    `answer` (plain data), `forbidden` (the forbidden name called) or `error` (with `where`
    and `stub`: the learner's function is still the exercise's stub)."""

    i: int
    answer: object
    forbidden: str
    error: str
    where: str
    stub: bool


@dataclass
class Reply:
    """What came back from one request: outcomes by case index, and how the run ended."""

    outcomes: dict[int, CaseOutcome] = field(default_factory=dict)
    load_error: str | None = None  # the learner's function could not be unpickled
    ended: Ended = "done"
    detail: str = ""  # for "exit": how the child ended; for "server": what failed
