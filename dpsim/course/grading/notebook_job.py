"""What runs inside a notebook's OS box (`grading.box`): its cells in a kernel, then the dump.

The grader starts `main()` in the box with a JSON request on stdin (the code cells, the
prelude and dump cells, the limits) and reads one line back from stdout: `RESULT_MARKER`
and JSON with the text the dump cell printed (the learner's functions as dill bytes) and
the notes on how the run went. Everything here runs as the learner's unprivileged user,
so the learner's code can change what this process prints; it can only change its own
notebook's functions and notes, which the grader treats as untrusted data anyway.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dpsim.course.grading.box import BOX_HOME
from dpsim.course.grading.kernel import Limits, run_notebook

RESULT_MARKER = "__dpsim_notebook_job__ "


def main() -> None:
    """Read the request from stdin, run the notebook in BOX_HOME, print the result line."""
    request = json.loads(sys.stdin.buffer.read())
    limits = Limits(**request["limits"])
    notes: list[str] = []
    text = run_notebook(request["cells"], request["prelude"], request["dump"],
                        Path(BOX_HOME), {**os.environ, **request["env"]}, limits, notes)
    out = sys.stdout
    out.write(RESULT_MARKER + json.dumps({"text": text, "notes": notes}) + "\n")
    out.flush()
