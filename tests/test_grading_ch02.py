"""Chapter 2 checks catch wrong answers (and say why), and pass right ones."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

from dpsim.collectives.cost import bytes_sent_per_rank
from dpsim.course.grading import check, run_check
from dpsim.course.grading.ch02 import CORRECT, classify_ring
from dpsim.runtime.collective_workers import ring_all_reduce_


# --- 2.1 ----------------------------------------------------------------------------------
def test_2_1_right_answer_passes(capsys: pytest.CaptureFixture[str]) -> None:
    check("2.1", lambda nbytes, n, algorithm: bytes_sent_per_rank("all_reduce", nbytes, n,
                                                                   algorithm))
    assert capsys.readouterr().out == "PASS 2.1 (5/5)\n"


def test_2_1_wrong_answers_are_caught_with_their_hint() -> None:
    def right(nbytes: int, n: int, algorithm: str) -> list[int]:
        return bytes_sent_per_rank("all_reduce", nbytes, n, algorithm)

    def half_ring(nbytes: int, n: int, algorithm: str) -> list[int]:
        got = right(nbytes, n, algorithm)
        return [b // 2 for b in got] if algorithm == "ring" else got

    def whole_tensor_steps(nbytes: int, n: int, algorithm: str) -> list[int]:
        return [2 * (n - 1) * nbytes] * n if algorithm == "ring" else right(nbytes, n, algorithm)

    def root_once(nbytes: int, n: int, algorithm: str) -> list[int]:
        return [nbytes] * n if algorithm == "naive" else right(nbytes, n, algorithm)

    def root_counts_received(nbytes: int, n: int, algorithm: str) -> list[int]:
        got = right(nbytes, n, algorithm)
        if algorithm == "naive":
            got[0] *= 2
        return got

    def one_rank(nbytes: int, n: int, algorithm: str) -> list[int]:
        return right(nbytes, n, algorithm)[:1]

    for fn, hint in ((half_ring, "reduce-scatter half"), (whole_tensor_steps, "2(N-1)/N"),
                     (root_once, "each of the other N-1"),
                     (root_counts_received, "receives as well"), (one_rank, "entries; it needs")):
        result = run_check("2.1", fn)
        assert not result.ok, fn.__name__
        assert hint in (result.message or ""), (fn.__name__, result.message)
        assert str(result.expected) not in (result.message or "")


# --- 2.2 ----------------------------------------------------------------------------------
def reduce_scatter_steps(arrays: list[np.ndarray], direction: int = 1, copies: bool = True,
                         shift: int = 1) -> list[list[np.ndarray]]:
    n = len(arrays)
    bufs = [np.array(a, copy=True) for a in arrays]
    chunks = np.array_split(np.arange(len(arrays[0])), n)
    out = []
    for t in range(n - 1):
        sent = [bufs[r][chunks[(r - shift - t) % n]].copy() for r in range(n)]
        for r in range(n):
            bufs[(r + direction) % n][chunks[(r - shift - t) % n]] += sent[r]
        out.append([b.copy() for b in bufs] if copies else bufs)
    return out


def test_2_2_right_answer_passes() -> None:
    assert run_check("2.2", reduce_scatter_steps).ok


def test_2_2_wrong_answers_are_caught_with_their_hint() -> None:
    cases = (
        (lambda a: reduce_scatter_steps(a, shift=0), "look shifted"),
        (lambda a: reduce_scatter_steps(a, direction=-1), "right neighbour"),
        (lambda a: reduce_scatter_steps(a, copies=False), "append copies"),
        (lambda a: reduce_scatter_steps(a)[:-1], "entries; it needs"),
        (lambda a: None, "forget `return`"),
    )
    for fn, hint in cases:
        result = run_check("2.2", fn)
        assert not result.ok
        assert hint in (result.message or ""), result.message


def test_2_2_stub_is_reported_as_not_done() -> None:
    def reduce_scatter_steps(arrays):  # type: ignore[no-untyped-def]
        raise NotImplementedError("write your code here")

    result = run_check("2.2", reduce_scatter_steps)
    assert not result.ok
    assert "not done yet" in (result.message or "")


# --- 2.3: classification without ranks ---------------------------------------------------
def _ranks(results: list[np.ndarray], inputs: list[np.ndarray]) -> list[dict]:
    total = np.sum(inputs, axis=0)
    return [{"input": i, "result": r, "sum": total} for i, r in zip(inputs, results,
                                                                    strict=True)]


def test_2_3_classify_recognises_each_mistake() -> None:
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(7) for _ in range(3)]
    total = np.sum(inputs, axis=0)
    assert classify_ring(_ranks([total] * 3, inputs)) == CORRECT
    assert "own data" in classify_ring(_ranks(inputs, inputs))
    assert "twice" in classify_ring(_ranks([2 * total] * 3, inputs))
    assert "rank 0" in classify_ring(_ranks([total, inputs[1], inputs[2]], inputs))
    one_chunk = []
    for r in range(3):
        mixed = inputs[r].copy()
        a, b = [(0, 3), (3, 5), (5, 7)][r]
        mixed[a:b] = total[a:b]
        one_chunk.append(mixed)
    assert "one chunk" in classify_ring(_ranks(one_chunk, inputs))
    assert "shape" in classify_ring(_ranks([total[:3]] * 3, inputs))


# --- 2.3: real ranks ----------------------------------------------------------------------
@pytest.mark.slow
def test_2_3_library_ring_passes_on_3_real_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    check("2.3", ring_all_reduce_)
    assert capsys.readouterr().out == "PASS 2.3 (5/5)\n"


def no_all_gather(tensor: torch.Tensor) -> None:
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = list(tensor.tensor_split(n))
    for t in range(n - 1):
        send, recv = (rank - 1 - t) % n, (rank - 2 - t) % n
        buf = torch.empty_like(chunks[recv])
        reqs = [dist.isend(chunks[send], (rank + 1) % n), dist.irecv(buf, (rank - 1) % n)]
        for req in reqs:
            assert req is not None
            req.wait()
        chunks[recv] += buf


@pytest.mark.slow
def test_2_3_missing_all_gather_is_caught_on_real_ranks() -> None:
    result = run_check("2.3", no_all_gather)
    assert not result.ok
    assert "all-gather phase is missing" in (result.message or ""), result.message


def test_2_3_stub_and_wrong_shape_need_no_launch() -> None:
    def ring_all_reduce(tensor):  # type: ignore[no-untyped-def]
        raise NotImplementedError("write your code here")

    result = run_check("2.3", ring_all_reduce)
    assert not result.ok
    assert "not done yet" in (result.message or "")

    def typo(tensor):  # type: ignore[no-untyped-def]
        return tensor.undefined_method()

    result = run_check("2.3", typo)
    assert not result.ok
    assert "AttributeError" in (result.message or "")
