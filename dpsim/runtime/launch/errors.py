"""The errors `launch` raises when ranks do not all finish, and how a rank's exit reads."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["DeadlockError", "LaunchError", "LaunchTimeoutError", "RankFailedError"]


class LaunchError(Exception):
    """Base class of the errors `launch` raises when ranks do not all finish."""

    pids: list[int]


class RankFailedError(LaunchError, RuntimeError):
    """A rank raised, returned something unpicklable, or its process died.

    Attributes: `rank`, `traceback` (the rank's traceback text, "" if it died without
    one), `exitcode` (process exit code, negative = killed by that signal; None if it
    raised), `exc_type` (name of the exception class the rank raised, or None), `phase`
    (where it raised: "start" = loading fn, "init" = joining the process group, "fn",
    "result" = pickling the return value; None if it died), `other_failures` (one line per
    other rank that failed too), `pids`.
    """

    def __init__(
        self,
        rank: int,
        summary: str,
        traceback_text: str = "",
        *,
        exitcode: int | None = None,
        exc_type: str | None = None,
        phase: str | None = None,
        other_failures: Sequence[str] = (),
        pids: Sequence[int] = (),
    ) -> None:
        message = f"rank {rank} failed: {summary}"
        if traceback_text:
            message += f"\n\nTraceback from rank {rank}:\n{traceback_text.rstrip()}"
        if other_failures:
            message += "\n\nOther ranks that failed too (often as a consequence):\n"
            message += "\n".join(f"  {line}" for line in other_failures)
        super().__init__(message)
        self.rank = rank
        self.summary = summary
        self.traceback = traceback_text
        self.exitcode = exitcode
        self.exc_type = exc_type
        self.phase = phase
        self.other_failures = list(other_failures)
        self.pids = list(pids)


class LaunchTimeoutError(LaunchError, TimeoutError):
    """Some ranks did not finish within `timeout_s`; they were stopped.

    Attributes: `ranks` (the ranks that did not finish), `timeout_s` (seconds),
    `states` (rank -> one line on what it was doing: "still starting: ...", "in a
    collective: ..." or "running Python code ..."), `stacks` (rank -> Python stack text
    captured just before stopping it, when available), `finished`, `pids`.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        timeout_s: float,
        *,
        finished: Sequence[int] = (),
        stacks: Mapping[int, str] | None = None,
        states: Mapping[int, str] | None = None,
        pids: Sequence[int] = (),
    ) -> None:
        stacks = dict(stacks or {})
        states = dict(states or {})
        noun = "rank" if len(ranks) == 1 else "ranks"
        message = (
            f"{noun} {', '.join(map(str, ranks))} did not finish within timeout_s={timeout_s:g} s"
            f" (finished: {list(finished) if finished else 'none'}); they were stopped."
        )
        for rank in ranks:
            message += f"\n  rank {rank}: {states.get(rank, 'state unknown')}"
        message += "\n" + _timeout_hint(states.values())
        for rank in sorted(stacks):
            message += f"\n\nWhere rank {rank} was:\n{stacks[rank].rstrip()}"
        super().__init__(message)
        self.ranks = list(ranks)
        self.timeout_s = timeout_s
        self.finished = list(finished)
        self.states = states
        self.stacks = stacks
        self.pids = list(pids)


class DeadlockError(LaunchTimeoutError):
    """Every unfinished rank waited in torch.distributed, and none used CPU, for a few
    seconds: none can send what another waits for. They were stopped before `timeout_s`.

    Attributes as `LaunchTimeoutError`'s, `states` saying what each rank waits for
    ("waits for a message rank 0 never sent ..."), and `after_s`: seconds from the launch
    to the report.
    """

    def __init__(
        self,
        ranks: Sequence[int],
        timeout_s: float,
        after_s: float,
        *,
        finished: Sequence[int] = (),
        stacks: Mapping[int, str] | None = None,
        states: Mapping[int, str] | None = None,
        pids: Sequence[int] = (),
    ) -> None:
        super().__init__(ranks, timeout_s, finished=finished, stacks=stacks, states=states,
                         pids=pids)
        noun = "rank" if len(ranks) == 1 else "ranks"
        verb = "waits for a message or collective no rank will send" if len(ranks) == 1 \
            else "wait for one another"
        message = (f"deadlock: {noun} {', '.join(map(str, ranks))} {verb} "
                   f"(finished: {list(finished) if finished else 'none'}); every unfinished "
                   f"rank waited in torch.distributed and none used CPU for a few seconds, "
                   f"so they were stopped after {after_s:.1f} s (timeout_s={timeout_s:g}).")
        for rank in ranks:
            message += f"\n  rank {rank} {self.states.get(rank, 'state unknown')}"
        message += ("\nEvery receive needs a matching send on the rank it names, and every "
                    "collective a call on every rank, in the same order.")
        for rank in sorted(self.stacks):
            message += f"\n\nWhere rank {rank} was:\n{self.stacks[rank].rstrip()}"
        self.args = (message,)
        self.after_s = after_s

    def __str__(self) -> str:
        return str(self.args[0])


def _timeout_hint(states: Iterable[str]) -> str:
    """What to do about ranks in these states."""
    kinds = {state.split(":", 1)[0] for state in states}
    if "in a collective" in kinds and len(kinds) > 1:
        return ("A rank waits forever in a collective that another rank never calls: make "
                "every rank call the same collectives in the same order.")
    if "still starting" in kinds:
        return ("Start-up (importing torch, joining the group) takes 1-3 s per rank and "
                "longer on a busy machine: raise timeout_s.")
    return ("A rank waits forever in a collective that another rank never calls; "
            "raise timeout_s if the work is only slow.")


def describe_exit(exitcode: int | None) -> str:
    """Human words for a process exit code (negative = killed by that signal)."""
    if exitcode is None:
        return "its process ended (exit code unknown) before returning a result"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        text = f"its process was killed by {name} (exit code {exitcode}) before returning a result"
        if name == "SIGKILL":
            text += " (killed from outside, often by the out-of-memory killer)"
        elif name in ("SIGSEGV", "SIGBUS", "SIGABRT"):
            text += "; it crashed in native code"
        return text
    return (
        f"its process exited with code {exitcode} before returning a result (if it never "
        "started fn, its own traceback is in the output above)"
    )
