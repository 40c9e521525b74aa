"""A notebook's functions: its code cells run in a fresh kernel, then the dump cell prints
the functions asked for as dill bytes (base64 in JSON), read back here and never unpickled.

Isolated (`run_boxed`), the kernel runs in an OS box of its own (`grading.box`), driven from
inside by `grading.notebook_job`; unisolated (`run_unboxed`), it runs as this user, importing
dpsim from a throwaway copy of the grader's verified one. Either way the prelude cell first
turns check() into a no-op (in the student's kernel it would only cost time), and every
process the notebook started is killed before its functions are handed on.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

from dpsim.course.grading import box, processes
from dpsim.course.grading.kernel import MAX_DUMP_CHARS, Limits, run_notebook
from dpsim.course.grading.notebook_job import RESULT_MARKER
from dpsim.course.grading.trusted_copy import fresh_copy, remove_tree

# Run first in the student's kernel: check() there would only cost time.
PRELUDE_CELL = '''\
try:
    import dpsim.course.grading as __g, dpsim.course.grading.core as __c
    __g.check = __c.check = lambda *args, **kwargs: None
    del __g, __c
except Exception:
    pass
'''
DUMP_CELL = '''\
def __dpsim_grader_dump(names, marker):
    import base64, json
    from dpsim.runtime.launch.pickling import dumps
    found = {{}}
    for name in names:
        if name in globals():
            try:
                found[name] = base64.b64encode(dumps(globals()[name])).decode()
            except Exception as exc:
                found[name] = {{"error": f"could not be pickled: {{type(exc).__name__}}: {{exc}}"}}
    print(marker + json.dumps(found), flush=True)
__dpsim_grader_dump({names!r}, {marker!r})
del __dpsim_grader_dump
'''
_JOB_BOOT = ("import sys; sys.path[:0] = [{lib!r}]; "
             "from dpsim.course.grading.notebook_job import main; main()")
MAX_JOB_BYTES = 3 * MAX_DUMP_CHARS  # what the notebook box may print: the dump, base64'd
START_ALLOWANCE_S = 180.0  # a kernel starting and the dump cell, beyond the notebook's cells


def parse_dump(text: str, marker: str) -> dict[str, bytes | str]:
    """Name -> dill bytes (or why not) from the dump cell's output; never unpickled here."""
    found: dict[str, bytes | str] = {}
    for line in text.splitlines():
        if not line.startswith(marker):
            continue
        try:
            raw = json.loads(line[len(marker):])
        except ValueError:
            continue
        for name, value in raw.items() if isinstance(raw, dict) else ():
            if isinstance(value, str):
                try:
                    found[name] = base64.b64decode(value, validate=True)
                except (ValueError, binascii.Error):
                    found[name] = "could not be read back from the kernel"
            elif isinstance(value, dict) and isinstance(value.get("error"), str):
                found[name] = value["error"][:1000]
    return found


def run_unboxed(cells: list[str], dump: str, token: str, notes: list[str],
                manifest: dict[str, bytes], env: dict[str, str], limits: Limits) -> str:
    """Run the cells and the dump cell as this user, dpsim imported from a fresh copy of
    `manifest`; what the kernel printed."""
    tmp = Path(tempfile.mkdtemp(prefix="dpsim-grade-"))
    try:
        work = tmp / "work"
        work.mkdir()
        lib = fresh_copy(manifest, tmp)
        env = {k: v for k, v in env.items() if not k.startswith("PYTHON")}
        env.update(PYTHONPATH=str(lib), PYTHONDONTWRITEBYTECODE="1", DPSIM_CHECK_SANDBOX="0")
        env[processes.TOKEN_VARIABLE] = token
        return run_notebook(cells, PRELUDE_CELL, dump, work, env, limits, notes)
    finally:
        remove_tree(tmp)


def run_boxed(cells: list[str], dump: str, token: str, notes: list[str], root: Path,
              env: dict[str, str], limits: Limits, box_limits: box.BoxLimits,
              deadline: float | None = None) -> str:
    """Run the cells and the dump cell in an OS box seeing the verified copy at `root` and
    only `env`; what the kernel printed (its notes added to `notes`).

    The box is killed whole at `deadline` (monotonic seconds; the notebook's limit, counted
    from when the grader started it), measured here in wall time, so nothing the notebook
    does to its own processes (stopping the job that drives its kernel, say) makes the
    grader wait longer. Without `deadline`: its limit plus START_ALLOWANCE_S from now."""
    env = {**env, "PYTHONPATH": box.BOX_LIB, "DPSIM_CHECK_SANDBOX": "0",
           processes.TOKEN_VARIABLE: token}
    request = json.dumps({"cells": cells, "prelude": PRELUDE_CELL, "dump": dump,
                          "env": env, "limits": asdict(limits)}).encode()
    argv = [sys.executable, "-I", "-B", "-c", _JOB_BOOT.format(lib=box.BOX_LIB)]
    if deadline is None:
        deadline = time.monotonic() + limits.notebook_timeout_s + START_ALLOWANCE_S
    group = box.group(box_limits)
    try:
        proc = subprocess.Popen(box.command(argv, root, env, box_limits),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env={"PATH": os.defpath},
                                start_new_session=True,
                                preexec_fn=box.rlimits(box_limits, group))
        try:
            out, ended = _exchange(proc, request, deadline, MAX_JOB_BYTES)
        finally:
            processes.kill_all(proc.pid, token)
            proc.wait()
    finally:
        note = group.finish("notebook's") if group is not None else None
        if note:
            notes.append(note)
    if ended:
        notes.append(ended)
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARKER.encode()):
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                raw = json.loads(line[len(RESULT_MARKER):])
                if isinstance(raw, dict) and isinstance(raw.get("text"), str):
                    got = raw.get("notes")
                    notes += [n[:1000] for n in got[:50] if isinstance(n, str)] \
                        if isinstance(got, list) else []
                    return str(raw["text"])
    notes.append("the notebook's run ended without giving back its functions")
    return ""


def _exchange(proc: subprocess.Popen[bytes], request: bytes, deadline: float, cap: int
              ) -> tuple[bytes, str]:
    """Send `request` to `proc`'s stdin and read its stdout until it ends, `deadline`
    (monotonic seconds) or `cap` bytes; (what it printed, why it was cut short or '')."""
    assert proc.stdin is not None and proc.stdout is not None

    def feed() -> None:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.write(request)
            proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    fd, size = proc.stdout.fileno(), 0
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), ("the notebook's run was stopped at its time limit "
                                      "(its whole box was killed)")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), ""
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            return b"".join(chunks), "the notebook's run printed too much; it was stopped"
