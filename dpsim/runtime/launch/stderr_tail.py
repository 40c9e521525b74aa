"""A rank's standard error, passed on to the launcher's and its last lines kept.

A rank that dies in native code (gloo's or NCCL's C++ throws, and the process aborts)
leaves its only explanation on stderr: "terminate called after throwing an instance of
'gloo::EnforceNotMet' ... Received data size doesn't match expected size". Each rank's
fd 2 is therefore a pipe whose other end the launcher reads (`StderrTail`, one thread per
rank): every byte goes on to the launcher's own fd 2 (so to the notebook or the terminal,
as before) and the last `TAIL_BYTES` are kept, for the error `launch` raises (`last_words`).
"""

from __future__ import annotations

import contextlib
import os
import threading

TAIL_BYTES = 8192  # bytes of a rank's stderr kept for its error message
_LAST_LINES = 6  # lines of it quoted, at most
_NOISE = ("[W", "Warning:", "  warnings.warn")  # torch's warnings, not a cause of death


class StderrTail:
    """The read end of one rank's stderr pipe: forwarded to fd 2, its tail kept."""

    def __init__(self, read_fd: int, forward_fd: int | None = 2) -> None:
        self._fd = read_fd
        self._forward = forward_fd
        self._tail = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name="dpsim-rank-stderr",
                                        daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while True:
                try:
                    data = os.read(self._fd, 65536)
                except OSError:
                    return
                if not data:
                    return
                if self._forward is not None:
                    with contextlib.suppress(OSError):
                        os.write(self._forward, data)
                with self._lock:
                    self._tail = (self._tail + data)[-TAIL_BYTES:]
        finally:
            with contextlib.suppress(OSError):
                os.close(self._fd)

    def text(self, wait_s: float = 0.0) -> str:
        """The kept tail, after waiting up to `wait_s` s for the pipe's end (the rank gone)."""
        self._thread.join(wait_s)
        with self._lock:
            return self._tail.decode(errors="replace")

    def close(self, wait_s: float = 1.0) -> None:
        """Wait up to `wait_s` s for the rest of the output (the thread ends at the pipe's
        end, once every process holding its write end exited)."""
        self._thread.join(wait_s)


def last_words(text: str, max_lines: int = _LAST_LINES) -> str:
    """The last lines of a rank's stderr that say why it died ('' if none): from the last
    'terminate called' (a C++ exception), else its last lines; torch's warnings left out."""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.lstrip().startswith(_NOISE)]
    start = max((i for i, line in enumerate(lines) if "terminate called" in line), default=None)
    if start is not None:
        lines = lines[start:]
    return "\n".join(lines[-max_lines:])
