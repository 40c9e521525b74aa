"""The cells of one notebook full of tricks (each for a different exercise) and one of
correct variants. `write(folder, marks)` writes them; the tricks leave the ids of the
processes they start in `marks`, so a test can see that none outlives the grading."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

# exercise id -> the trick its function tries (every one must earn 0)
TRICKS = {
    "1.1": "an int subclass whose __eq__ is always True",
    "1.2": "reading case.expected from the caller's stack frames",
    "1.3": "looking the answer up with get_exercise(id).cases() and gc",
    "2.1": "patching core.same, compare.same and math.isclose, replacing sys.modules",
    "2.2": "a dill __reduce__ payload that patches the comparison when unpickled",
    "3.1": "a detached process that rewrites the grader's copy of dpsim and plants a .pyc",
    "3.2": "patching the grader's modules through sys.modules",
    "3.3": "reading the environment for a secret or an answer",
    "3.4": "writing a .pyc and a changed module into the grader's copy from the sandbox",
    "4.1": "monkeypatching torch.allclose and math.isclose",
    "4.2": "a float subclass whose __float__ lies and whose __eq__ is always True",
    "4.3": "a tensor subclass whose __eq__ is always True",
    "5.1": "a huge answer (tens of MB of JSON)",
    "5.3": "a 20 GiB allocation",
    "6.1": "os.fork of a background writer that leaves the session",
}

HEAD = '''\
import dpsim.course.grading as g, dpsim.course.grading.core as core
core.same = lambda *a, **k: True
g.check = lambda *a, **k: print("PASS")
from dpsim.grading import check
print("PASS 1.1 (3/3)")
MARKS = {marks!r}
'''

TRICK_CELLS = [  # the endless cell comes first: after its kill only HEAD runs again
    '''\
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
while True:
    pass
''',
    '''\
class AlwaysEqual(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__

def training_state_bytes(module, optimizer):
    return AlwaysEqual(0)
''',
    '''\
import inspect

def mlp_activation_bytes(batch_size, widths):
    frame = inspect.currentframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if hasattr(value, "expected"):
                return value.expected
        frame = frame.f_back
    return -1
''',
    '''\
def largest_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    import gc, os
    from dpsim.course.grading.core import get_exercise, student_seed
    key = (n_params, activation_bytes_per_sample, memory_bytes)
    here = os.path.basename(os.getcwd())
    for seed in (None, student_seed(here + "/01_tricks.ipynb")):
        for case in get_exercise("1.3").cases(seed):
            if tuple(case.args[:3]) == key:
                return case.expected
    for obj in gc.get_objects():
        if type(obj).__name__ == "Case" and tuple(obj.args[:3]) == key:
            return obj.expected
    return -1
''',
    '''\
def all_reduce_bytes_sent(nbytes, world_size, algorithm):
    import math, sys
    import dpsim.course.grading.compare as compare
    import dpsim.course.grading.core as core
    core.same = compare.same = lambda *a, **k: True
    math.isclose = lambda *a, **k: True
    sys.modules["dpsim.course.grading.compare"] = type(sys)("fake")
    return [0]
check("2.1", all_reduce_bytes_sent)
''',
    '''\
class Payload:
    def __reduce__(self):
        return (exec, ("import dpsim.course.grading.core as c, dpsim.course.grading.compare as m"
                       "\\nc.same = m.same = lambda *a, **k: True",))

PAYLOAD = Payload()

def reduce_scatter_steps(arrays):
    PAYLOAD
    return []
check("2.2", reduce_scatter_steps)
''',
    '''\
import glob, os, tempfile, time

def _tamper():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                with open(os.path.join(MARKS, "detached.pid"), "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass
            pattern = os.path.join(tempfile.gettempdir(), "dpsim-grader-lib-*", "dpsim", "course",
                                   "grading")
            for _ in range(3000):
                for root in glob.glob(pattern):
                    try:
                        os.chmod(root, 0o755)
                        os.chmod(os.path.join(root, "compare.py"), 0o644)
                        with open(os.path.join(root, "compare.py"), "a") as f:
                            f.write("\\ndef same(*a, **k):\\n    return True\\n")
                        os.makedirs(os.path.join(root, "__pycache__"), exist_ok=True)
                    except OSError:
                        pass
                time.sleep(0.1)
            os._exit(0)
        os._exit(0)
    os.wait()

_tamper()

def chunk_sizes(batch_size, n_devices):
    return [0]
check("3.1", chunk_sizes)
''',
    '''\
def scatter(batch, n_devices):
    import sys
    for name, module in list(sys.modules.items()):
        if name.startswith("dpsim.course.grading"):
            for attr in ("same", "judge", "hint"):
                if hasattr(module, attr):
                    setattr(module, attr, lambda *a, **k: True)
    return []
check("3.2", scatter)

def gather(outputs):
    import os
    return [float(len(v)) for k, v in os.environ.items() if "SECRET" in k] or [0.0]
check("3.3", gather)

def device0_extra_bytes(batch_size, out_features, n_params, n_param_tensors):
    import os, sys
    for path in sys.path:
        root = os.path.join(path, "dpsim", "course", "grading")
        if os.path.isdir(root):
            try:
                os.chmod(root, 0o755)
                os.makedirs(os.path.join(root, "__pycache__"), exist_ok=True)
                with open(os.path.join(root, "__pycache__", "compare.cpython-311.pyc"), "wb") as f:
                    f.write(b"not bytecode")
                with open(os.path.join(root, "ch03.py"), "a") as f:
                    f.write("\\nraise SystemExit\\n")
            except OSError:
                pass
    return 0
check("3.4", device0_extra_bytes)
''',
    '''\
def predicted_speedup(gil_share, n_threads, n_cores):
    import math, torch
    torch.allclose = lambda *a, **k: True
    math.isclose = lambda *a, **k: True
    return -1.0
check("4.1", predicted_speedup)

class Liar(float):
    def __eq__(self, other):
        return True
    def __float__(self):
        return 0.5
    __hash__ = float.__hash__

def gil_share(intervals):
    return Liar(-1.0)
check("4.2", gil_share)

import torch

class AlwaysEqualTensor(torch.Tensor):
    def __eq__(self, other):
        return True

def measured_speedup(times_s):
    return torch.zeros(3).as_subclass(AlwaysEqualTensor)
check("4.3", measured_speedup)
''',
    '''\
def rank_indices(n_samples, world_size, rank, shuffle, seed, epoch, drop_last):
    return list(range(1_000_000, 3_500_000))  # 20 MB of JSON
check("5.1", rank_indices)

def bucket_sizes(param_nbytes, bucket_cap_mb=25.0, first_bucket_cap_mb=1.0):
    import torch
    return [int(torch.ones(20 * 2**30, dtype=torch.uint8).sum())]
check("5.3", bucket_sizes)

def zero_bytes_per_device_total(n_params, world_size, stage):
    import os, time
    if os.fork() == 0:
        os.setsid()
        try:
            with open(os.path.join(MARKS, "sandbox_child.pid"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
        time.sleep(600)
        os._exit(0)
    return -1
check("6.1", zero_bytes_per_device_total)
''',
    '''\
try:
    import numpy as np
    np.ones(20 * 2**30 // 8)
    outcome = "allocated"
except MemoryError:
    outcome = "MemoryError"
try:  # the test reads it where the notebook can write outside (unboxed); boxed it cannot
    with open(os.path.join(MARKS, "kernel_memory.txt"), "w") as f:
        f.write(outcome)
except OSError:
    pass

def largest_model(memory_GB, world_size, stage):
    n = world_size
    per_param = 2 / (n if stage >= 3 else 1) + 2 / (n if stage >= 2 else 1) \\
        + 12 / (n if stage >= 1 else 1)
    return int(memory_GB * 10**9 / per_param)
check("6.4", largest_model)
''',
]

VARIANT_CELLS = [
    '''\
from dpsim.grading import check
import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard  # dill alone cannot ship what uses it

def largest_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    raise NotImplementedError("write your code")

def my_batch(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):
    assert callable(fully_shard)
    free = memory_bytes - n_params * bytes_per_param
    return max(free, 0) // activation_bytes_per_sample
check("1.3", my_batch)
''',
    '''\
def chunk_sizes(batch_size, n_devices):
    size, out, start = -(-batch_size // n_devices), [], 0
    while start < batch_size:
        out.append(min(size, batch_size - start))
        start += size
    return torch.tensor(out)
check("3.1", chunk_sizes)

def predicted_speedup(gil_share, n_threads, n_cores):
    return np.min([n_threads, n_cores, 1 / gil_share if gil_share else np.inf])
check("4.1", predicted_speedup)

def gil_share(intervals):
    t = torch.tensor([[end - start, kind == "python"] for kind, start, end in intervals],
                     dtype=torch.float32)
    return (t[:, 0] * t[:, 1]).sum() / t[:, 0].sum()
check("4.2", gil_share)

def measured_speedup(times_s):
    out = {}
    for k in sorted(times_s):
        out[k] = np.float64(k * times_s[1] / times_s[k])
    return out
check("4.3", measured_speedup)
''',
    '''\
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

def average_gradients(model, world_size):
    if not dist.is_initialized():
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat)
    flat /= world_size
    for grad, new in zip(grads, _unflatten_dense_tensors(flat, grads)):
        grad.copy_(new)
check("5.2", average_gradients)
''',
]
VARIANTS = {"1.3": 1, "3.1": 1, "4.1": 2, "4.2": 1, "4.3": 1, "5.2": 2}  # id -> points


def write(folder: Path, marks: Path) -> tuple[Path, Path]:
    """Write 01_tricks.ipynb and variants.ipynb into `folder`; their paths."""
    tricks = new_notebook(cells=[new_code_cell(HEAD.format(marks=str(marks))),
                                 *[new_code_cell(c) for c in TRICK_CELLS]])
    variants = new_notebook(cells=[new_code_cell(c) for c in VARIANT_CELLS])
    paths = folder / "01_tricks.ipynb", folder / "variants.ipynb"
    nbformat.write(tricks, paths[0])
    nbformat.write(variants, paths[1])
    return paths
