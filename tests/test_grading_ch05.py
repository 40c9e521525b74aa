"""Chapter 5 checks catch wrong answers (and say why), and pass right ones."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from dpsim.course.grading import run_check
from dpsim.course.grading.ch05 import AVERAGE, classify, sampler_indices


def _hinted(message: str | None, hint: str) -> bool:
    """The mistake's hint, or (lists of another length) the length hint that comes first."""
    return hint in (message or "") or "entries; it needs" in (message or "")


# --- 5.1 ----------------------------------------------------------------------------------
def rank_indices(n, world_size, rank, shuffle, seed, epoch, drop_last):  # type: ignore[no-untyped-def]
    order = (torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
             if shuffle else list(range(n)))
    if drop_last:
        order = order[: n - n % world_size]
    else:
        total = -(-n // world_size) * world_size
        while len(order) < total:
            order += order[: total - len(order)]
    return order[rank::world_size]


def test_5_1_right_answer_passes() -> None:
    assert run_check("5.1", rank_indices).ok
    assert run_check("5.1", lambda *a, **k: sampler_indices(*a, **k)).ok


def test_5_1_wrong_answers_are_caught_with_their_hint() -> None:
    def seed_only(n, ws, rank, shuffle, seed, epoch, drop_last):  # type: ignore[no-untyped-def]
        return rank_indices(n, ws, rank, shuffle, seed, 0, drop_last)

    def contiguous(n, ws, rank, shuffle, seed, epoch, drop_last):  # type: ignore[no-untyped-def]
        everyone = [rank_indices(n, ws, r, shuffle, seed, epoch, drop_last) for r in range(ws)]
        order = [everyone[i % ws][i // ws] for i in range(sum(map(len, everyone)))]
        size = len(order) // ws
        return order[rank * size:(rank + 1) * size]

    def no_padding(n, ws, rank, shuffle, seed, epoch, drop_last):  # type: ignore[no-untyped-def]
        order = (torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
                 .tolist() if shuffle else list(range(n)))
        return order[rank::ws] if not drop_last else order[: n - n % ws][rank::ws]

    def always_pad(n, ws, rank, shuffle, seed, epoch, drop_last):  # type: ignore[no-untyped-def]
        return rank_indices(n, ws, rank, shuffle, seed, epoch, False)

    for fn, hint in ((seed_only, "seed + epoch"), (contiguous, "contiguous block"),
                     (no_padding, "did not pad"), (always_pad, "drop_last=True")):
        result = run_check("5.1", fn)
        assert not result.ok, fn.__name__
        assert _hinted(result.message, hint), (fn.__name__, result.message)


# --- 5.2 ----------------------------------------------------------------------------------
def average_gradients(model, world_size):  # type: ignore[no-untyped-def]
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world_size


def sum_only(model, world_size):  # type: ignore[no-untyped-def]
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)


@pytest.mark.slow
def test_5_2_right_answer_passes_on_real_ranks() -> None:
    result = run_check("5.2", average_gradients)
    assert result.ok, result.message


@pytest.mark.slow
def test_5_2_wrong_answer_is_caught_on_real_ranks() -> None:
    """One launch; the other outcomes (reduce to rank 0, ...) are tested on classify()."""
    result = run_check("5.2", sum_only)
    assert not result.ok, result.message
    assert "did not divide" in (result.message or ""), result.message


def test_5_2_mistakes_found_before_launching() -> None:
    def forgets_frozen(model, world_size):  # type: ignore[no-untyped-def]
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size

    message = run_check("5.2", forgets_frozen).message or ""
    assert "raised TypeError" in message
    assert "case 1 of 3" in message
    message = run_check("5.2", lambda model, world_size: model).message or ""
    assert "return None" in message
    message = run_check("5.2", lambda model, world_size: None).message or ""
    assert "never all-reduced" in message

    def divide_only(model, world_size):  # type: ignore[no-untyped-def]
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= world_size

    assert "without all-reducing" in (run_check("5.2", divide_only).message or "")


def test_5_2_classify_names_each_outcome() -> None:
    local = [{"w": [1.0, 2.0]}, {"w": [5.0, 10.0]}]

    def ranks(*afters: list[float]) -> list[dict[str, dict[str, list[float]]]]:
        return [{"local": loc, "after": {"w": a}} for loc, a in zip(local, afters, strict=True)]

    assert classify(ranks([3.0, 6.0], [3.0, 6.0])) == AVERAGE
    assert classify(ranks([6.0, 12.0], [6.0, 12.0])).startswith("the sum")
    assert classify(ranks([1.5, 3.0], [1.5, 3.0])).startswith("the average divided")
    assert classify(ranks([1.0, 2.0], [5.0, 10.0])).startswith("each rank still")
    assert classify(ranks([3.0, 6.0], [5.0, 10.0])).startswith("rank 0 holds the average")
    assert classify(ranks([1.0, 1.0], [1.0, 1.0])).startswith("the gradients are neither")


# --- 5.3 ----------------------------------------------------------------------------------
def bucket_sizes(param_nbytes, bucket_cap_mb=25.0, first_bucket_cap_mb=1.0):  # type: ignore[no-untyped-def]
    out, current = [], 0
    for nbytes in reversed(param_nbytes):
        current += nbytes
        if current >= int((first_bucket_cap_mb if not out else bucket_cap_mb) * 2**20):
            out.append(current)
            current = 0
    return out + ([current] if current else [])


def test_5_3_right_answer_passes() -> None:
    assert run_check("5.3", bucket_sizes).ok


def test_5_3_wrong_answers_are_caught_with_their_hint() -> None:
    def forward(sizes, cap, first):  # type: ignore[no-untyped-def]
        return bucket_sizes(sizes[::-1], cap, first)

    def no_first(sizes, cap, first):  # type: ignore[no-untyped-def]
        return bucket_sizes(sizes, cap, cap)

    def close_before(sizes, cap, first):  # type: ignore[no-untyped-def]
        out, current = [], 0
        for nbytes in reversed(sizes):
            limit = int((first if not out else cap) * 2**20)
            if current and current + nbytes > limit:
                out.append(current)
                current = 0
            current += nbytes
        return out + ([current] if current else [])

    def decimal_mb(sizes, cap, first):  # type: ignore[no-untyped-def]
        return bucket_sizes(sizes, cap * 1e6 / 2**20, first * 1e6 / 2**20)

    for fn, hint in ((forward, "reverse order"), (no_first, "small first bucket"),
                     (close_before, "adds it, then closes"), (decimal_mb, "MiB")):
        result = run_check("5.3", fn)
        assert not result.ok, fn.__name__
        assert _hinted(result.message, hint), (fn.__name__, result.message)
