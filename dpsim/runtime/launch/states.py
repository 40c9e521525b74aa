"""What a rank that did not finish was doing: read from its Python stack and the store.

A rank is either still starting (it never joined the process group, or waits for peers that
did not), blocked in a collective (its innermost frames are in `torch/distributed`), or
running Python code of the user's function. `rank_state` says which, in one line.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpsim.runtime.launch.rank import RANK_FRAMES, joined_key

_FRAME = re.compile(r'^\s*File "(?P<path>.*)", line (?P<line>\d+) in (?P<name>.+)$')
_THREAD = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+")
_WRAPPERS = frozenset({"wrapper", "inner", "decorate_context"})
_WHAT_CUT_MEANS = {
    "_set_up_process": "setting up its process",
    "join_group": "joining the process group",
    "_result_message": "pickling its return value",
    "_leave_together": "waiting for the other ranks to finish",
}


@dataclass(frozen=True)
class Frame:
    """One line of a faulthandler dump: a function `name` at `line` of `path`."""

    path: str
    line: int
    name: str

    def where(self) -> str:
        """`name (file.py, line N)`."""
        return f"{self.name} ({os.path.basename(self.path)}, line {self.line})"

    @property
    def in_distributed(self) -> bool:
        """True for code of torch.distributed."""
        return "/torch/distributed/" in self.path.replace(os.sep, "/")

    @property
    def in_library(self) -> bool:
        """True for the standard library, installed packages and frozen modules."""
        path = self.path.replace(os.sep, "/")
        return (path.startswith(("<frozen", *_LIBRARY_DIRS))
                or "/site-packages/" in path or "/dist-packages/" in path)


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    return tuple(os.path.join(path, "") for path in sorted(found))


_LIBRARY_DIRS = _library_dirs()


def parse_threads(dump: str) -> list[list[Frame]]:
    """The frames of each thread in a faulthandler dump, most recent call first."""
    threads: list[list[Frame]] = []
    for line in dump.splitlines():
        if _THREAD.match(line):
            threads.append([])
            continue
        match = _FRAME.match(line)
        if match:
            if not threads:
                threads.append([])
            threads[-1].append(Frame(match["path"], int(match["line"]), match["name"]))
    return threads


def main_frames(dump: str) -> tuple[list[Frame], str | None]:
    """The frames above the rank's own code in the thread that runs fn, and where it cut.

    The cut names the first frame of `rank.RANK_FRAMES` (None if no thread has one).
    """
    for frames in parse_threads(dump):
        for i, frame in enumerate(frames):
            if frame.name in RANK_FRAMES:
                return frames[:i], frame.name
    return [], None


def joined_ranks(store: Any, prefix: str, world_size: int) -> set[int] | None:
    """Ranks that joined the process group, read from the launcher's store; None if unknown."""
    try:
        import torch.distributed as dist

        view = dist.PrefixStore(prefix, store)
        return {rank for rank in range(world_size) if view.check([joined_key(rank)])}
    except Exception:  # the store is only a witness: never let it hide the timeout
        return None


def rank_state(rank: int, dump: str | None, joined: set[int] | None, world_size: int) -> str:
    """One line on what `rank` was doing when it was stopped.

    `dump`: its faulthandler text (None if it gave none). `joined`: ranks that joined the
    process group (None if unknown).
    """
    frames, cut = main_frames(dump) if dump else ([], None)
    unsure_joining = joined is None and cut in ("_set_up_process", "join_group")
    if (joined is not None and rank not in joined) or unsure_joining:
        what = {"_run_fn": "importing torch or loading fn", **_WHAT_CUT_MEANS}.get(cut or "")
        return ("still starting: it never joined the process group"
                + (f" (it was {what})" if what else ""))
    if joined is not None and len(joined) < world_size:
        missing = ", ".join(str(r) for r in range(world_size) if r not in joined)
        return (f"still starting: it joined the process group and waits for rank(s) "
                f"{missing} to join; fn has not started")
    if cut in ("_result_message", "_leave_together"):
        return f"finished fn; {_WHAT_CUT_MEANS[cut]}"
    if not frames:
        return "running fn (its Python stack could not be read)"
    return _in_fn(frames)


def _in_fn(frames: Sequence[Frame]) -> str:
    """'in a collective ...' or 'running Python code ...' from the frames above fn's caller."""
    fn_frame = frames[-1]  # the outermost frame above the rank's own code is fn's
    top = 0
    while top < len(frames) and frames[top].in_distributed:
        top += 1
    if top:
        collective = _collective_name(frames[:top])
        caller = frames[top] if top < len(frames) else fn_frame
        return f"in a collective: blocked in {collective} (torch.distributed), " \
               f"called from {caller.where()}"
    user = next((f for f in frames if not f.in_library), fn_frame)
    text = f"running Python code in {user.where()}"
    if user is not fn_frame:
        text += f", called from fn {fn_frame.where()}"
    if frames[0].in_library and frames[0] is not user:
        text += f"; now inside {frames[0].where()}"
    return text


def _collective_name(run: Sequence[Frame]) -> str:
    """The public function that user code called: outermost first, wrappers skipped."""
    for frame in reversed(run):
        if not frame.name.startswith("_") and frame.name not in _WRAPPERS:
            return frame.name
    return run[0].name
