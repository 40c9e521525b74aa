"""Chapter 2 checks catch wrong answers (and say why), and pass right ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.distributed import all_reduce as imported_all_reduce_call
from torch.distributed import broadcast as imported_broadcast_call
from torch.distributed import distributed_c10d as c10d
from torch.distributed import irecv as imported_irecv
from torch.distributed import isend as imported_isend

from dpsim.course.exercises.ch02_p2p_answers import (
    binomial_tree,
    expected_answer,
    ring_explain,
    ring_final,
    slips,
    with_schedules,
)
from dpsim.course.exercises.ch02_ranks import launch_jobs, per_rank, rank_data
from dpsim.course.grading import Case, check, compare, core, run_check
from dpsim.sim.collectives.cost import bytes_sent_per_rank


# --- 2.1 ----------------------------------------------------------------------------------
def test_2_1_right_answer_passes(capsys: pytest.CaptureFixture[str]) -> None:
    def by_hand(nbytes: int, n: int, algorithm: str) -> list[int]:
        if algorithm == "ring":
            return [2 * (n - 1) * (nbytes // n)] * n
        return [(n - 1) * nbytes] + [nbytes] * (n - 1)

    for nbytes, n in ((1200, 3), (64, 4)):  # the library's own answer agrees
        for algorithm in ("ring", "naive"):
            assert by_hand(nbytes, n, algorithm) == bytes_sent_per_rank("all_reduce", nbytes,
                                                                        n, algorithm)
    check("2.1", by_hand)
    assert capsys.readouterr().out == "PASS 2.1 (5/5)\n"


def test_2_1_wrong_answers_are_caught_with_their_hint() -> None:
    def right(nbytes: int, n: int, algorithm: str) -> list[int]:  # by hand: the library's
        if algorithm == "ring":                                   # own answer is forbidden
            return [2 * (n - 1) * (nbytes // n)] * n
        return [(n - 1) * nbytes] + [nbytes] * (n - 1)

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

    def n_steps(nbytes: int, n: int, algorithm: str) -> list[int]:
        return [2 * nbytes] * n if algorithm == "ring" else right(nbytes, n, algorithm)

    for fn, hint in ((half_ring, "reduce-scatter half"), (whole_tensor_steps, "2(N-1)/N"),
                     (n_steps, "each phase has N-1 steps"),
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


def mutating_steps(arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Right steps, but computed in the arrays it was given."""
    steps = reduce_scatter_steps(arrays)
    for a, b in zip(arrays, steps[-1], strict=True):
        a[:] = b
    return steps


def mutating_in_place_steps(arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Works in the arrays it was given, one send at a time with no snapshot: the steps are
    wrong too (it had only the generic hint)."""
    n = len(arrays)
    chunks = np.array_split(np.arange(len(arrays[0])), n)
    out = []
    for t in range(n - 1):
        for r in range(n):
            arrays[(r + 1) % n][chunks[(r - 1 - t) % n]] += arrays[r][chunks[(r - 1 - t) % n]]
        out.append([b.copy() for b in arrays])
    return out


def test_2_2_right_answer_passes() -> None:
    assert run_check("2.2", reduce_scatter_steps).ok


def test_2_2_wrong_answers_are_caught_with_their_hint() -> None:
    cases = (
        (lambda a: reduce_scatter_steps(a, shift=0), "look shifted"),
        (lambda a: reduce_scatter_steps(a, direction=-1), "right neighbour"),
        (lambda a: reduce_scatter_steps(a, copies=False), "append copies"),
        (lambda a: reduce_scatter_steps(a)[:-1], "one step fewer"),
        (mutating_steps, "changed the input arrays"),
        (mutating_in_place_steps, "changed the input arrays"),
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


# --- 2.3 to 2.7: answers without ranks ---------------------------------------------------


def test_binomial_tree_doubles_the_holders_every_round() -> None:
    sent, received = binomial_tree(4, 0)
    assert sent == [[1, 2], [3], [], []]
    assert received == [[], [0], [0], [1]]
    sent, received = binomial_tree(5, 3)  # relative ranks: 3 -> 4 -> 0, ...
    assert sent[3] == [4, 0, 2]
    assert sent[4] == [1]
    assert sorted(len(r) for r in received) == [0, 1, 1, 1, 1]


def test_ring_final_is_the_sum_and_its_slips_are_not() -> None:
    arrays = [rank_data(5, r, 7) for r in range(3)]
    total = torch.stack(arrays).sum(0).tolist()
    assert ring_final(arrays) == [total] * 3
    assert ring_final(arrays, gather=False) != [total] * 3
    assert ring_final(arrays, add_in_gather=True) != [total] * 3
    assert arrays[0].tolist() == rank_data(5, 0, 7).tolist()  # inputs left alone


def test_every_slip_differs_from_the_answer() -> None:
    items = [{"seed": 1, "length": 5, "n_segments": 2, "root": 1}]
    for kind in ("all_gather", "reduce_scatter", "all_reduce", "pipelined", "broadcast"):
        expected = expected_answer(kind, 4, items)
        for hint, wrong in slips(kind, 4, items).items():
            assert not core.same(wrong, expected), (kind, hint)


# --- 2.3 to 2.7: right and wrong functions on real ranks ---------------------------------
# One launch per world size runs every function below; each answer is then compared with the
# expected one and the hint it gets is checked, as run_check does with a case. The slips
# that call torch's own collectives (dist.all_reduce, all_gather_into_tensor, broadcast)
# match only if torch's results equal the expected ones: a cross-check of the references.

def done(*requests: Any) -> None:
    """Wait for every request (isend / irecv return one, or None off the group)."""
    for request in requests:
        assert request is not None
        request.wait()


def ring_all_reduce(tensor: torch.Tensor, gather: bool = True, add: bool = False,
                    copy: bool = False) -> torch.Tensor | None:
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = (tensor.clone() if copy else tensor).tensor_split(n)
    for t in range(n - 1):
        send, recv = chunks[(rank - 1 - t) % n], chunks[(rank - 2 - t) % n]
        scratch = torch.empty_like(recv)
        done(dist.isend(send, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
        recv += scratch
    for t in range(n - 1 if gather else 0):
        send, recv = chunks[(rank - t) % n], chunks[(rank - 1 - t) % n]
        landing = torch.empty_like(recv) if add else recv
        done(dist.isend(send, (rank + 1) % n), dist.irecv(landing, (rank - 1) % n))
        if add:
            recv += landing
    return None if copy else tensor


def no_all_gather(tensor: torch.Tensor) -> None:
    ring_all_reduce(tensor, gather=False)


def add_in_gather(tensor: torch.Tensor) -> None:
    ring_all_reduce(tensor, add=True)


def sums_a_copy(tensor: torch.Tensor) -> None:
    ring_all_reduce(tensor, copy=True)


def library_all_reduce(tensor: torch.Tensor) -> None:
    dist.all_reduce(tensor)


def library_ring(tensor: torch.Tensor) -> None:
    from dpsim.runtime.collective_workers import ring_all_reduce_

    ring_all_reduce_(tensor)


def all_gather(tensor: torch.Tensor, order: str = "rank", extra: bool = False,
               mutate: bool = False) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    out = torch.empty(n * tensor.numel())
    pieces = out.split(tensor.numel())
    pieces[rank].copy_(tensor)
    for t in range(n if extra else n - 1):
        send, recv = pieces[(rank - t) % n], pieces[(rank - 1 - t) % n]
        done(dist.isend(send, (rank + 1) % n), dist.irecv(recv, (rank - 1) % n))
    if mutate:
        tensor.zero_()
    if order == "arrival":
        return torch.cat([pieces[(rank - k) % n] for k in range(n)])
    return out


def gather_arrival_order(tensor: torch.Tensor) -> torch.Tensor:
    return all_gather(tensor, order="arrival")


def gather_one_step_more(tensor: torch.Tensor) -> torch.Tensor:
    return all_gather(tensor, extra=True)


def gather_mutates(tensor: torch.Tensor) -> torch.Tensor:
    return all_gather(tensor, mutate=True)


def gather_with_imported_calls(tensor: torch.Tensor) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    out = torch.empty(n * tensor.numel())
    pieces = out.split(tensor.numel())
    pieces[rank].copy_(tensor)
    for t in range(n - 1):
        send, recv = pieces[(rank - t) % n], pieces[(rank - 1 - t) % n]
        done(imported_isend(send, (rank + 1) % n), imported_irecv(recv, (rank - 1) % n))
    return out


def library_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    out = torch.empty(dist.get_world_size() * tensor.numel())
    dist.all_gather_into_tensor(out, tensor)
    return out


def reduce_scatter(tensor: torch.Tensor, shift: int = 1, clone: bool = True) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = (tensor.clone() if clone else tensor).tensor_split(n)
    for t in range(n - 1):
        send, recv = chunks[(rank - shift - t) % n], chunks[(rank - shift - 1 - t) % n]
        scratch = torch.empty_like(recv)
        done(dist.isend(send, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
        recv += scratch
    return chunks[rank].clone()


def scatter_shifted(tensor: torch.Tensor) -> torch.Tensor:
    return reduce_scatter(tensor, shift=0)


def scatter_in_place(tensor: torch.Tensor) -> torch.Tensor:
    return reduce_scatter(tensor, clone=False)


def pipelined(tensor: torch.Tensor, n_segments: int) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = [c.tensor_split(n_segments) for c in tensor.tensor_split(n)]
    sends = [dist.isend(s, (rank + 1) % n) for s in chunks[(rank - 1) % n]]
    for step in range(2 * (n - 1)):
        arriving = chunks[(rank - 2 - step) % n]
        landing = [torch.empty_like(s) for s in arriving] if step < n - 1 else list(arriving)
        recvs = [dist.irecv(b, (rank - 1) % n) for b in landing]
        done(*sends)
        sends = []
        for segment, buf, req in zip(arriving, landing, recvs, strict=True):
            done(req)
            if step < n - 1:
                segment += buf
            if step + 1 < 2 * (n - 1):
                sends.append(dist.isend(segment, (rank + 1) % n))
    done(*sends)
    return tensor


def pipelined_one_segment(tensor: torch.Tensor, n_segments: int) -> torch.Tensor:
    return pipelined(tensor, 1)


def pipelined_whole_chunks(tensor: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Segments as messages, but each chunk's segments go on only once all arrived."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = [c.tensor_split(n_segments) for c in tensor.tensor_split(n)]
    for step in range(2 * (n - 1)):
        sending = chunks[(rank - 1 - step) % n]
        arriving = chunks[(rank - 2 - step) % n]
        landing = [torch.empty_like(s) for s in arriving] if step < n - 1 else list(arriving)
        done(*[dist.isend(s, (rank + 1) % n) for s in sending],
             *[dist.irecv(b, (rank - 1) % n) for b in landing])
        if step < n - 1:
            for segment, buf in zip(arriving, landing, strict=True):
                segment += buf
    return tensor


def batched_ring_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """The ring with dist.batch_isend_irecv of dist.P2POp(dist.isend, ...)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = tensor.tensor_split(n)
    for t in range(2 * (n - 1)):
        send, recv = chunks[(rank - 1 - t) % n], chunks[(rank - 2 - t) % n]
        landing = torch.empty_like(recv) if t < n - 1 else recv
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % n),
               dist.P2POp(dist.irecv, landing, (rank - 1) % n)]
        done(*dist.batch_isend_irecv(ops))
        if t < n - 1:
            recv += landing
    return tensor


def returns_a_clone(tensor: torch.Tensor) -> torch.Tensor:
    """Right sum, right messages, but in a clone: the caller's tensor is left as it was."""
    out = tensor.clone()
    ring_all_reduce(out)
    return out


def fake_ring(tensor: torch.Tensor) -> None:
    """The ring's messages, sent for show, beside the library's collective."""
    n, rank = dist.get_world_size(), dist.get_rank()
    scratch = torch.empty_like(tensor)
    for _ in range(2 * (n - 1)):
        done(dist.isend(tensor, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))


def imported_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    fake_ring(tensor)
    imported_all_reduce_call(tensor)
    return tensor


def imported_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    scratch = torch.empty_like(tensor)
    for _ in range(n - 1):
        done(dist.isend(tensor, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
    out = torch.empty(n * tensor.numel())
    c10d.all_gather_into_tensor(out, tensor)
    return out


# torch's functional collectives reach the backend without any ProcessGroup method (they
# were false passes beside faked messages): noticed by the ranks' dispatch mode

def world() -> list[int]:
    return list(range(dist.get_world_size()))


def funcol_all_reduce(tensor: torch.Tensor) -> None:
    import torch.distributed._functional_collectives as funcol

    tensor.copy_(funcol.all_reduce(tensor, "sum", world()))


def funcol_all_reduce_beside_a_ring(tensor: torch.Tensor) -> None:
    import torch.distributed._functional_collectives as funcol

    fake_ring(tensor)
    tensor.copy_(funcol.all_reduce(tensor, "sum", world()))


def nn_functional_all_reduce(tensor: torch.Tensor) -> None:
    import torch.distributed.nn.functional as dist_fn

    fake_ring(tensor)
    tensor.copy_(dist_fn.all_reduce(tensor))


def op_all_reduce(tensor: torch.Tensor) -> None:
    """The dispatcher's op itself, with no Python function of torch.distributed around it."""
    from torch.distributed.distributed_c10d import _get_default_group

    fake_ring(tensor)
    out = torch.ops._c10d_functional.all_reduce(tensor, "sum", _get_default_group().group_name)
    tensor.copy_(torch.ops._c10d_functional.wait_tensor(out))


def funcol_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    n, rank = dist.get_world_size(), dist.get_rank()
    scratch = torch.empty_like(tensor)
    for _ in range(n - 1):
        done(dist.isend(tensor, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
    return funcol.wait_tensor(funcol.all_gather_tensor(tensor, 0, world()))


def nn_functional_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    import torch.distributed.nn.functional as dist_fn

    n, rank = dist.get_world_size(), dist.get_rank()
    scratch = torch.empty_like(tensor)
    for _ in range(n - 1):
        done(dist.isend(tensor, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
    return torch.cat(dist_fn.all_gather(tensor))


# rings whose results come out right from other messages than the exercise's schedule
# (were passes: only the peers and the number of messages were checked)

def ring_all_reduce_shifted(tensor: torch.Tensor) -> torch.Tensor:
    """A consistent ring one chunk off the text's: rank r sends chunk (r - t) first."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = tensor.tensor_split(n)
    for t in range(n - 1):
        send, recv = chunks[(rank - t) % n], chunks[(rank - 1 - t) % n]
        scratch = torch.empty_like(recv)
        done(dist.isend(send, (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
        recv += scratch
    for t in range(n - 1):
        send, recv = chunks[(rank + 1 - t) % n], chunks[(rank - t) % n]
        done(dist.isend(send, (rank + 1) % n), dist.irecv(recv, (rank - 1) % n))
    return tensor


def ring_all_reduce_reversed(tensor: torch.Tensor) -> torch.Tensor:
    """The ring the other way round (to rank - 1): the right sum, the wrong neighbours."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = tensor.tensor_split(n)
    for t in range(n - 1):
        send, recv = chunks[(rank + 1 + t) % n], chunks[(rank + 2 + t) % n]
        scratch = torch.empty_like(recv)
        done(dist.isend(send, (rank - 1) % n), dist.irecv(scratch, (rank + 1) % n))
        recv += scratch
    for t in range(n - 1):
        send, recv = chunks[(rank + t) % n], chunks[(rank + 1 + t) % n]
        done(dist.isend(send, (rank - 1) % n), dist.irecv(recv, (rank + 1) % n))
    return tensor


def gather_whole_buffer(tensor: torch.Tensor) -> torch.Tensor:
    """Every step sends the whole output so far, not one piece."""
    n, rank = dist.get_world_size(), dist.get_rank()
    out = torch.zeros(n * tensor.numel())
    pieces = out.split(tensor.numel())
    pieces[rank].copy_(tensor)
    for t in range(n - 1):
        scratch = torch.empty_like(out)
        done(dist.isend(out.clone(), (rank + 1) % n), dist.irecv(scratch, (rank - 1) % n))
        k = (rank - 1 - t) % n
        pieces[k].copy_(scratch.split(tensor.numel())[k])
    return out


def _sum_whole_tensors(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's whole tensor passed round the ring and summed (the slip of both below)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    total, passing = tensor.clone(), tensor.clone()
    for _ in range(n - 1):
        arriving = torch.empty_like(tensor)
        done(dist.isend(passing, (rank + 1) % n), dist.irecv(arriving, (rank - 1) % n))
        total += arriving
        passing = arriving
    return total


def scatter_whole_tensors(tensor: torch.Tensor) -> torch.Tensor:
    """Whole tensors passed round the ring and summed, then this rank's chunk cut out."""
    n, rank = dist.get_world_size(), dist.get_rank()
    return _sum_whole_tensors(tensor).tensor_split(n)[rank].clone()


def ring_whole_tensors(tensor: torch.Tensor) -> None:
    """Whole tensors passed round the ring and summed (it had only the generic hint)."""
    tensor.copy_(_sum_whole_tensors(tensor))


def all_to_all_reduce(tensor: torch.Tensor) -> None:
    """Every rank sends its tensor to every other one, in rank order, and sums."""
    n, rank = dist.get_world_size(), dist.get_rank()
    others = [q for q in range(n) if q != rank]
    arriving = [torch.empty_like(tensor) for _ in others]
    done(*[dist.isend(tensor.clone(), q) for q in others],
         *[dist.irecv(a, q) for a, q in zip(arriving, others, strict=True)])
    for a in arriving:
        tensor += a


def all_to_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank sends its tensor to every other one, in rank order (it had only the
    generic hint: the slip's table holds the (rank + k) order only)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    out = torch.empty(n * tensor.numel())
    pieces = out.split(tensor.numel())
    pieces[rank].copy_(tensor)
    others = [q for q in range(n) if q != rank]
    done(*[dist.isend(tensor, q) for q in others], *[dist.irecv(pieces[q], q) for q in others])
    return out


def funcol_all_reduce_in_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Another collective than the kind's own: an all-reduce of a zero-padded copy."""
    import torch.distributed._functional_collectives as funcol

    n, rank = dist.get_world_size(), dist.get_rank()
    out = tensor.new_zeros(n * tensor.numel())
    out.split(tensor.numel())[rank].copy_(tensor)
    return funcol.wait_tensor(funcol.all_reduce(out, "sum", world()))


def funcol_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    n = dist.get_world_size()
    chunks = tensor.tensor_split(n)
    size = chunks[0].numel()  # reduce_scatter_tensor needs equal pieces: pad the short ones
    full = torch.cat([torch.cat([c, c.new_zeros(size - c.numel())]) for c in chunks])
    mine = funcol.wait_tensor(funcol.reduce_scatter_tensor(full, "sum", 0, world()))
    return mine[: chunks[dist.get_rank()].numel()].clone()


def funcol_p2p_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """A right ring all-gather with the functional collectives' point-to-point ops."""
    import torch.distributed._functional_collectives as funcol

    wait = torch.ops._c10d_functional.wait_tensor
    n, rank = dist.get_world_size(), dist.get_rank()
    out = torch.empty(n * tensor.numel())
    pieces = out.split(tensor.numel())
    pieces[rank].copy_(tensor)
    for t in range(n - 1):
        send, recv = pieces[(rank - t) % n], pieces[(rank - 1 - t) % n]
        sent = funcol.isend_inplace(send.clone(), (rank + 1) % n)
        got = funcol.irecv_inplace(recv, (rank - 1) % n)
        wait(sent)
        recv.copy_(wait(got))
    return out


def funcol_broadcast(tensor: torch.Tensor, root: int) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    data = tensor.clone()
    broadcast(data, root)  # the tree's messages, for show
    tensor.copy_(funcol.wait_tensor(funcol.broadcast(tensor, root, world())))
    return tensor


def nn_functional_broadcast(tensor: torch.Tensor, root: int) -> torch.Tensor:
    import torch.distributed.nn.functional as dist_fn

    data = tensor.clone()
    broadcast(data, root)
    tensor.copy_(dist_fn.broadcast(tensor, root))
    return tensor


def imported_broadcast(tensor: torch.Tensor, root: int) -> torch.Tensor:
    data = tensor.clone()
    broadcast(data, root)  # the tree's messages, for show
    imported_broadcast_call(tensor, root)
    return tensor


def broadcast(tensor: torch.Tensor, root: int, relative: bool = True) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    base = root if relative else 0
    rel, mask = (rank - base) % n, 1
    while mask < n:
        if rel < mask and rel + mask < n:
            done(dist.isend(tensor, (rel + mask + base) % n))
        elif mask <= rel < 2 * mask:
            done(dist.irecv(tensor, (rel - mask + base) % n))
        mask *= 2
    return tensor


def linear_broadcast(tensor: torch.Tensor, root: int) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    if rank == root:
        for k in range(1, n):
            done(dist.isend(tensor, (root + k) % n))
    else:
        done(dist.irecv(tensor, root))
    return tensor


def linear_broadcast_rank_order(tensor: torch.Tensor, root: int) -> torch.Tensor:
    """The root sends to each rank in rank order (it had only the generic hint)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    if rank == root:
        done(*[dist.isend(tensor, q) for q in range(n) if q != root])
    else:
        done(dist.irecv(tensor, root))
    return tensor


def library_broadcast(tensor: torch.Tensor, root: int) -> torch.Tensor:
    dist.broadcast(tensor, src=root)
    return tensor


def broadcast_from_rank_0(tensor: torch.Tensor, root: int) -> torch.Tensor:
    return broadcast(tensor, root, relative=False)


ITEMS: list[dict[str, Any]] = [{"seed": 11, "length": 2, "n_segments": 2, "root": 2},
         {"seed": 12, "length": 13, "n_segments": 3, "root": 1}]
# (kind, function, hint it must get; None: it is right)
ON_3_RANKS: list[tuple[str, Callable[..., Any], str | None]] = [
    ("all_reduce", ring_all_reduce, None),
    ("all_reduce", no_all_gather, "all-gather phase is missing"),
    ("all_reduce", add_in_gather, "put the arriving (finished) chunk in place"),
    ("all_reduce", sums_a_copy, "in place (tensor.tensor_split(N) gives views"),
    ("all_reduce", returns_a_clone, "in place (tensor.tensor_split(N) gives views"),
    ("all_reduce", batched_ring_all_reduce, None),
    ("all_reduce", imported_all_reduce, "the messages you sent beside it"),
    ("all_reduce", library_all_reduce, "you called dist.all_reduce"),
    ("all_reduce", library_ring, "not to call dpsim.runtime.collective_workers"),
    ("all_reduce", funcol_all_reduce, "you called dist.all_reduce (or a functional form"),
    ("all_reduce", ring_all_reduce_shifted, "not from the exercise's ring"),
    ("all_reduce", ring_all_reduce_reversed, "yours go the other way"),
    ("all_reduce", funcol_all_reduce_beside_a_ring, "the messages you sent beside it"),
    ("all_reduce", nn_functional_all_reduce, "the messages you sent beside it"),
    ("all_reduce", op_all_reduce, "the messages you sent beside it"),
    ("all_reduce", ring_whole_tensors, "passed whole tensors round"),
    ("all_reduce", all_to_all_reduce, "an all-to-all"),
    ("all_gather", all_gather, None),
    ("all_gather", gather_arrival_order, "rank order"),
    ("all_gather", gather_one_step_more, "one message more"),
    ("all_gather", gather_mutates, "changed the input tensor"),
    ("all_gather", gather_with_imported_calls, None),  # counted wherever isend comes from
    ("all_gather", imported_all_gather, "you called dist.all_gather_into_tensor (imported"),
    ("all_gather", library_all_gather, "dist.all_gather_into_tensor"),
    ("all_gather", funcol_all_gather, "you called dist.all_gather_into_tensor (imported"),
    ("all_gather", nn_functional_all_gather, "you called dist.all_gather (imported"),
    ("all_gather", funcol_all_reduce_in_all_gather, "you called dist.all_reduce (imported"),
    ("all_gather", funcol_p2p_all_gather, None),  # its messages are counted too
    ("all_gather", gather_whole_buffer, "piece (r - t) mod N"),
    ("all_gather", all_to_all_gather, "an all-to-all"),
    ("reduce_scatter", reduce_scatter, None),
    ("reduce_scatter", scatter_shifted, "shifted by one"),
    ("reduce_scatter", scatter_in_place, "changed the input tensor"),
    ("reduce_scatter", funcol_reduce_scatter, "you called dist.reduce_scatter_tensor"),
    ("reduce_scatter", scatter_whole_tensors, "more than one"),
    ("pipelined", pipelined, None),
    ("pipelined", pipelined_one_segment, "n_segments segments"),
    ("pipelined", pipelined_whole_chunks, "no pipelining"),
]
ON_4_RANKS: list[tuple[str, Callable[..., Any], str | None]] = [
    ("broadcast", broadcast, None),
    ("broadcast", linear_broadcast, "linear broadcast"),
    ("broadcast", linear_broadcast_rank_order, "linear broadcast"),
    ("broadcast", broadcast_from_rank_0, "relative to the root"),
    ("broadcast", library_broadcast, "you called dist.broadcast"),  # and its results agree
    ("broadcast", imported_broadcast, "the messages you sent beside it"),
    ("broadcast", funcol_broadcast, "the messages you sent beside it"),
    ("broadcast", nn_functional_broadcast, "the messages you sent beside it"),
]


@pytest.fixture(scope="module")
def answers() -> dict[int, list[list[dict[str, object]]]]:
    """Every function above on real gloo ranks: one launch of 3 ranks, one of 4."""
    return {n: launch_jobs(n, [(fn, kind, with_schedules(kind, n, ITEMS))
                               for kind, fn, _ in jobs])
            for n, jobs in ((3, ON_3_RANKS), (4, ON_4_RANKS))}


@pytest.mark.slow
@pytest.mark.parametrize(("n", "index"), [(3, i) for i in range(len(ON_3_RANKS))]
                         + [(4, i) for i in range(len(ON_4_RANKS))],
                         ids=[f"{k}-{f.__name__}" for k, f, _ in ON_3_RANKS + ON_4_RANKS])
def test_functions_on_real_ranks_get_their_verdict(
        answers: dict[int, list[list[dict[str, object]]]], n: int, index: int) -> None:
    kind, fn, hint = (ON_3_RANKS if n == 3 else ON_4_RANKS)[index]
    answer = per_rank(answers[n], index, kind)
    case = Case("ranks", expected=expected_answer(kind, n, ITEMS), mistakes=slips(kind, n, ITEMS))
    if hint is None:
        assert core.same(answer, case.expected), answer
    else:
        assert not core.same(answer, case.expected)
        # as core's feedback: the case's explain (another collective called, the right
        # result from other messages), else the mistakes
        words = ring_explain(kind, case.expected, answer) or compare.hint(
            answer, case.expected, case.mistakes, case.rel_tol, case.abs_tol)
        assert hint in words, (fn.__name__, words)


def test_stubs_and_typos_fail_before_any_launch() -> None:
    def stub(tensor, *args):  # type: ignore[no-untyped-def]
        raise NotImplementedError("Exercise 2.x: write your code here")

    for exercise_id in ("2.3", "2.4", "2.5", "2.6", "2.7"):
        result = run_check(exercise_id, stub)
        assert not result.ok
        assert "not done yet" in (result.message or ""), result.message

    def typo(tensor, *args):  # type: ignore[no-untyped-def]
        return tensor.undefined_method()

    result = run_check("2.4", typo)
    assert not result.ok
    assert "AttributeError" in (result.message or "")


# --- 2.1, 2.2: the reference reached around its tripwire ---------------------------------
def bytes_from_a_copy_of_the_module(nbytes: int, n: int, algorithm: str) -> list[int]:
    import importlib.util

    import dpsim.sim.collectives.cost as cost

    spec = importlib.util.spec_from_file_location("copy_of_cost", cost.__file__)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.bytes_sent_per_rank("all_reduce", nbytes, n, algorithm))


def steps_from_the_source(arrays: list[np.ndarray]) -> list[list[np.ndarray]]:
    import sys
    import types

    import dpsim.sim.collectives.ring as ring

    module = types.ModuleType("copy_of_ring")
    sys.modules["copy_of_ring"] = module
    try:
        with open(ring.__file__, encoding="utf-8") as f:
            exec(f.read(), module.__dict__)
        steps = module.ring_all_reduce_steps([np.array(a) for a in arrays])
    finally:
        del sys.modules["copy_of_ring"]
    return [[b.copy() for b in s.buffers] for s in steps[1:len(arrays)]]


@pytest.mark.parametrize(("exercise_id", "fn"), [("2.1", bytes_from_a_copy_of_the_module),
                                                 ("2.2", steps_from_the_source)])
def test_a_fresh_copy_of_the_reference_is_still_forbidden(exercise_id: str,
                                                          fn: Callable[..., Any]) -> None:
    """A copy made with spec_from_file_location or exec of the source escaped the
    tripwire and earned full marks; the check now sees the reference's code run."""
    result = run_check(exercise_id, fn)
    assert result.passed == 0
    assert "write it yourself, not to call dpsim.sim.collectives" in (result.message or "")


def every_rank_receives_first(tensor: torch.Tensor) -> torch.Tensor:
    n, rank = dist.get_world_size(), dist.get_rank()
    dist.recv(tensor, (rank - 1) % n)  # no rank ever sends
    return tensor


@pytest.mark.slow
def test_a_deadlocked_ring_is_reported_within_seconds() -> None:
    """It took the launch's whole 60 s (and 120 s in all) before; now a few seconds."""
    import time

    start = time.monotonic()
    result = run_check("2.3", every_rank_receives_first)
    elapsed = time.monotonic() - start
    assert result.passed == 0
    assert elapsed < 30, f"took {elapsed:.1f} s"
    assert "the ranks wait for one another" in (result.message or "")
    assert "rank 0 waits for a message (recv), at every_rank_receives_first" in (
        result.message or "")


@pytest.mark.slow
def test_functional_all_reduce_beside_a_ring_earns_nothing_through_the_check() -> None:
    """Was a false pass of 2.3: the ring's messages for show and the functional all-reduce."""
    result = run_check("2.3", funcol_all_reduce_beside_a_ring)
    assert (result.passed, result.ok) == (0, False)
    assert "the messages you sent beside it" in (result.message or ""), result.message
