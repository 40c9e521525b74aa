"""End a process that ran torch.distributed without the interpreter's teardown."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import NoReturn


def exit_without_teardown(code: int) -> NoReturn:
    """Run the atexit handlers, flush stdout and stderr, then `os._exit(code)`.

    Skipping Python's finalization does two things for a rank: it saves the ~0.5 s of CPU
    the teardown costs with torch loaded, and it avoids the one phase in which a gloo worker
    thread, freeing the last collective's saved Python context, asks for the GIL, is ended
    by CPython with pthread_exit, and aborts the process through a C++ destructor
    (SIGABRT, "terminate called without an active exception"; scripts/train_ddp.py).
    """
    with contextlib.suppress(BaseException):  # nothing may stop the exit itself
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    os._exit(code)
