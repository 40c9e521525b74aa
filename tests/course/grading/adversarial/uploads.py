"""What a class uploads, beside honest classmates: text no file or terminal can encode,
names that are formulas or forge log lines, a notebook that claims a classmate's id or
hedges between answers, a cell whose source is not text, and links to the solutions, to a
file holding the grading secret and to the grader's environment. `write(folder, ...)` lays
out the submissions folder; each entry of `UPLOADS` says what one student folder holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

# student folder -> what it uploads (every one must leave the batch's reports whole)
UPLOADS = {
    "alice": "two honest notebooks with default ids: one row, both counted",
    "carol": "an honest notebook: 1.3 and 4.2 right, 3.1 wrong",
    "mallory": "a correct notebook whose metadata claims to be carol's",
    "@SUM(1+1)": "a formula as folder name; metadata id with a lone surrogate; a hedge "
                 "(the right 1.3 passed to check(), then a wrong one); an error message with "
                 "a lone surrogate",
    "jos\udce9": "an honest notebook in a folder whose name is not UTF-8 (b'jos\\xe9')",
    "eve\ngraded 9 notebook(s) FORGED\x1b[2J": "a log line forged by the folder name; a "
                                                 "cell whose source is an int",
    "linker": "links to the course's solution, to a file holding the grading secret and "
              "to /proc/self/environ",
    "linkdir": "a folder that is a link to the course's solutions",
    "=HYPERLINK(\"x\")": "a formula as folder name holding a link to the solutions",
}
SECRET = "dpsim-test-secret-5e1b"

RIGHT = '''\
from dpsim.grading import check

def largest_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    return max(memory_bytes - n_params * bytes_per_param, 0) // activation_bytes_per_sample

def chunk_sizes(batch_size, n_devices):
    size, out, start = -(-batch_size // n_devices), [], 0
    while start < batch_size:
        out.append(min(size, batch_size - start))
        start += size
    return out

def gil_share(intervals):
    total = sum(end - start for _, start, end in intervals)
    return sum(end - start for kind, start, end in intervals if kind == "python") / total
'''
CHECK_ALL = 'check("1.3", largest_batch)\ncheck("3.1", chunk_sizes)\ncheck("4.2", gil_share)\n'
WRONG_CHUNKS = '''\
def chunk_sizes(batch_size, n_devices):
    return [batch_size // n_devices] * n_devices  # drops the remainder
'''
HEDGE = '''\
def wrong_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    return 0

def gil_share(intervals):
    raise RuntimeError("broken \\ud800 text")

check("1.3", largest_batch)
check("1.3", wrong_batch)
check("4.2", gil_share)
'''


def notebook(cells: list[object], student: str | None = None) -> bytes:
    """A notebook file's bytes (JSON with ASCII escapes, so a lone surrogate is valid)."""
    meta: dict[str, object] = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                              "name": "python3"}}
    if student is not None:
        meta["dpsim"] = {"student": student}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": meta,
          "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": source,
                     "outputs": [], "execution_count": None} for i, source in enumerate(cells)]}
    return json.dumps(nb).encode("ascii")


def write(folder: Path, solution: Path, secret_file: Path) -> list[Path]:
    """Lay out the uploads under `folder`; the notebooks to pass to the grader."""
    def put(student: str, name: str, data: bytes) -> Path:
        where = Path(os.fsdecode(os.fsencode(folder / student)))
        where.mkdir(exist_ok=True)
        (where / name).write_bytes(data)
        return where / name

    paths = [put("alice", "part1.ipynb", notebook([RIGHT, 'check("1.3", largest_batch)\n'])),
             put("alice", "part2.ipynb", notebook([RIGHT, 'check("3.1", chunk_sizes)\n'
                                                          'check("4.2", gil_share)\n'])),
             put("carol", "work.ipynb", notebook([RIGHT, WRONG_CHUNKS, CHECK_ALL])),
             put("mallory", "claim.ipynb", notebook([RIGHT, CHECK_ALL], student="carol")),
             put("@SUM(1+1)", "hedge.ipynb", notebook([RIGHT, HEDGE], student="mallory\ud800")),
             put("jos\udce9", "work.ipynb", notebook([RIGHT, CHECK_ALL])),
             put("eve\ngraded 9 notebook(s) FORGED\x1b[2J", "work.ipynb",
                 notebook([0, 'check("1.3", largest_batch)\n']))]
    links = folder / "linker"
    links.mkdir()
    for name, target in (("01_solution.ipynb", solution), ("secret.ipynb", secret_file),
                         ("environ.ipynb", Path("/proc/self/environ"))):
        (links / name).symlink_to(target)
        paths.append(links / name)
    (folder / "linkdir").symlink_to(solution.parent, target_is_directory=True)
    paths.append(folder / "linkdir" / solution.name)
    formula = folder / "=HYPERLINK(\"x\")"
    formula.mkdir()
    (formula / solution.name).symlink_to(solution)
    paths.append(formula / solution.name)
    return paths
