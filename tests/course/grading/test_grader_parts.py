"""The grader's parts: plain answers, comparison, tripwires, seeds, the harness contract,
and the sandbox on its own (slow: it starts processes)."""

from __future__ import annotations

import inspect
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from dpsim.course.grading import core, plain, registry
from dpsim.course.grading.compare import same
from dpsim.course.grading.core import run_check
from dpsim.course.grading.registry import Case, all_exercises, exercise, student_seed


class AlwaysEqual(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def test_plain_round_trip_and_strict_decoding() -> None:
    value = {1: [1.5, None, True, "x"], (2, 3): {"a": [torch.tensor([1, 2]).tolist()]}}
    assert plain.decode(plain.encode(plain.to_plain(value))) == value
    assert plain.to_plain(torch.tensor([[1.0, 2.0]])) == [[1.0, 2.0]]
    assert plain.to_plain(np.float32(0.5)) == 0.5
    assert type(plain.to_plain(AlwaysEqual(3))) is int
    assert plain.to_plain((1, 2)) == [1, 2]
    with pytest.raises(plain.NotPlain):
        plain.to_plain(object())
    for bad in ('{"a": 1}', '{"dict": [[1]]}', "[" * 100 + "]" * 100, "not json"):
        with pytest.raises(ValueError, match=r"JSON|pair|nested"):
            plain.decode(bad)


def test_float32_rounding_is_not_a_wrong_answer() -> None:
    exact = 1 / 3
    assert same(float(np.float32(exact)), exact)
    assert not same(exact * (1 + 1e-5), exact)
    assert not same(2**24 + 1, 2**24)  # integers stay exact


def _toy_cases(rng: random.Random) -> Iterator[Case]:
    for _ in range(3):
        n = rng.randint(10**6, 10**8)
        yield Case(f"bytes({n})", args=(n,), expected=16 * n)


@pytest.fixture
def toy() -> Iterator[str]:
    """Exercise 99.2: model-state bytes, with dpsim's own answer forbidden."""
    exercise("99.2", function="state", title="State bytes",
             forbidden=("dpsim.sim.cost.memory.model_state_bytes",))(_toy_cases)
    yield "99.2"
    registry._REGISTRY.pop("99.2", None)


def test_forbidden_name_trips(toy: str) -> None:
    import dpsim.sim.cost.memory
    from dpsim.sim.cost.memory import model_state_bytes

    def calls_it(n: int) -> object:
        return dpsim.sim.cost.memory.model_state_bytes(n)

    def calls_imported(n: int) -> object:
        return model_state_bytes(n)

    for fn in (calls_it, calls_imported):
        message = run_check(toy, fn).message or ""
        assert ("this exercise asks you to write it yourself, not to call "
                "dpsim.sim.cost.memory.model_state_bytes") in message
    assert model_state_bytes(10) is not None  # restored afterwards: no tripwire
    assert run_check(toy, lambda n: 16 * n).ok
    assert not run_check(toy, lambda n: AlwaysEqual(0)).ok


def test_student_seeds_are_stable_and_differ() -> None:
    assert student_seed("alice") == student_seed("alice")
    assert student_seed("alice") != student_seed("bob")
    assert student_seed("alice", "s1") != student_seed("alice", "s2")
    ex = core.get_exercise("1.3")
    labels = [[c.label for c in ex.cases(seed)] for seed in (None, 1, 2, 1)]
    assert labels[0] == [c.label for c in ex.cases()]
    assert labels[1] == labels[3]
    assert labels[1] != labels[2]


def test_every_harness_keeps_the_contract() -> None:
    """Case.call is a module-level function of a grading or exercise module (it is
    pickled by reference into the sandbox); an expected value is never a harness."""
    for ex in all_exercises():
        for case in ex.cases():
            if case.call is None:
                continue
            module = inspect.getmodule(case.call)
            assert module is not None, ex
            assert module.__name__.startswith(
                ("dpsim.course.grading.", "dpsim.course.exercises.")), ex
            assert getattr(module, case.call.__name__, None) is case.call, ex.exercise_id


def test_kill_all_refuses_its_own_session() -> None:
    import os

    from dpsim.course.grading.processes import kill_all

    with pytest.raises(ValueError, match="own session"):
        kill_all(os.getsid(0))


@pytest.mark.slow
def test_sandbox_judges_plain_answers_only(tmp_path: Path) -> None:
    """One sandbox: a right answer, cheats, a stub, a loop, an exit, a detached child."""
    import dill

    from dpsim.course.grading.sandbox import Sandbox

    def right(n_params, activation_bytes_per_sample, memory_bytes, bytes_per_param=16):  # type: ignore[no-untyped-def]
        free = memory_bytes - n_params * bytes_per_param
        return 0 if free < 0 else free // activation_bytes_per_sample

    def stack_reader(*args):  # type: ignore[no-untyped-def]
        frame = inspect.currentframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                if hasattr(value, "expected"):
                    return value.expected
            frame = frame.f_back
        return -1

    def stub(*args):  # type: ignore[no-untyped-def]
        raise NotImplementedError("write your code")

    def loops(*args):  # type: ignore[no-untyped-def]
        while True:
            pass

    def exits(*args):  # type: ignore[no-untyped-def]
        import os
        os._exit(3)

    pid_file = str(tmp_path / "detached.pid")

    def detaches(*args, **kwargs):  # type: ignore[no-untyped-def]
        import os
        import time
        ready_r, ready_w = os.pipe()
        if os.fork() == 0:  # leaves the session, keeps the answer pipe open
            os.setsid()
            with open(pid_file, "a") as f:
                f.write(f"{os.getpid()}\n")
            os.write(ready_w, b"x")
            time.sleep(600)
            os._exit(0)
        os.close(ready_w)
        os.read(ready_r, 1)  # the pid is on disk before the answer is
        os.close(ready_r)
        return -1

    with Sandbox() as sandbox:
        assert run_check("1.3", right, sandbox=sandbox).ok
        assert not run_check("1.3", lambda *a: AlwaysEqual(0), sandbox=sandbox).ok
        assert not run_check("1.3", stack_reader, sandbox=sandbox).ok
        assert "not done yet" in (run_check("1.3", stub, sandbox=sandbox).message or "")
        slow = run_check("1.3", loops, sandbox=sandbox, timeout_s=2).message or ""
        assert "took longer than 2 s" in slow
        assert "exit code 3" in (run_check("1.3", exits, sandbox=sandbox).message or "")
        assert run_check("1.3", right, sandbox=sandbox).ok  # the server lives on
        # the check ends with the function's process, not at the deadline ("timeout")
        cases = core.get_exercise("1.3").cases()
        reply = sandbox.run(dill.dumps(detaches, recurse=True), (), core._calls(cases), 300)
        assert reply.ended == "done", (reply.ended, reply.detail)
        assert [reply.outcomes[i].get("answer") for i in range(len(cases))] == [-1] * len(cases)
    pids = [int(line) for line in Path(pid_file).read_text().split()]
    assert len(pids) == len(cases)
    assert [p for p in pids if Path(f"/proc/{p}").exists() and _state(p) != "Z"] == []


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2:].split()[0]


def test_hints_that_used_to_mislead() -> None:
    """2.1 with N steps per phase, 4.1 with max for min, 2.3 adding in the all-gather."""
    from dpsim.course.exercises.ch02_p2p_answers import expected_answer, slips
    from dpsim.course.grading.compare import hint

    def n_steps(nbytes: int, world_size: int, algorithm: str) -> list[int]:
        if algorithm == "naive":
            return [(world_size - 1) * nbytes] + [nbytes] * (world_size - 1)
        return [2 * world_size * (nbytes // world_size)] * world_size

    message = run_check("2.1", n_steps).message or ""
    assert "N-1 steps, not N" in message
    assert "whole tensor" not in message

    def largest(g: float, n: int, c: int) -> float:
        return max(float(n), float(c), 1 / g if g else 0.0)

    assert "took the largest" in (run_check("4.1", largest).message or "")
    items = [{"seed": 1, "length": 7}]
    expected, mistakes = expected_answer("all_reduce", 3, items), slips("all_reduce", 3, items)
    added = next(v for k, v in mistakes.items() if "adding it to your partial sum" in k)
    words = hint(added, expected, mistakes, 1e-5, 1e-5)
    assert "adding it to your partial sum" in words
    assert "all-gather phase is missing" not in words


def test_trusted_copy_restores_itself_and_sees_source_edits(tmp_path: Path) -> None:
    from dpsim.course.grading.trusted_copy import TrustedCopy

    package = tmp_path / "src" / "dpsim"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "core.py").write_text("def same(a, b):\n    return a == b\n")
    copy = TrustedCopy(package)
    try:
        assert copy.verify() == []
        grading = copy.root / "dpsim" / "sub"
        grading.chmod(0o755)
        (grading / "core.py").chmod(0o644)
        (grading / "core.py").write_text("def same(a, b):\n    return True\n")
        (grading / "__pycache__").mkdir()
        (grading / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"planted")
        (grading / "extra.pyc").write_bytes(b"sourceless")
        changes = copy.verify()
        assert "restored dpsim/sub/core.py" in changes
        assert "removed dpsim/sub/extra.pyc" in changes
        assert not (grading / "__pycache__").exists()
        assert (grading / "core.py").read_text().endswith("return a == b\n")
        (package / "sub" / "core.py").write_text("changed = True\n")
        assert copy.source_changes() == ["dpsim/sub/core.py"]
    finally:
        copy.close()
    assert not copy.root.exists()
