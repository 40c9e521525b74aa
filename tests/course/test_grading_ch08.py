"""Chapter 8 checks: wrong measurements on real ranks are caught (right ones: solutions/08)."""

from __future__ import annotations

import pytest
from torch import nn

from dpsim.course.exercises.ch05 import torch_bucket_sizes
from dpsim.course.exercises.ch08 import make_model
from dpsim.course.grading import get_exercise, run_check


def measure_wrap(model, wrap=True):  # type: ignore[no-untyped-def]
    from torch.nn.parallel import DistributedDataParallel as DDP

    before = float(sum(p.detach().double().sum() for p in model.parameters()))
    if wrap:
        DDP(model)
    return {"before": before, "after": float(sum(p.detach().double().sum()
                                                 for p in model.parameters()))}


def measure_wrap_unwrapped(model):  # type: ignore[no-untyped-def]
    return measure_wrap(model, wrap=False)


def measure_buckets(model, bucket_cap_mb, x, y, pass_cap=True, reduce=True,  # type: ignore[no-untyped-def]
                    size=lambda b: b.numel()):
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb) if pass_cap else DDP(model)
    sizes = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]
        sizes.append(size(bucket.buffer()))
        if reduce:
            return allreduce_hook(state, bucket)
        done = torch.futures.Future()  # the local buffer as it is: nothing all-reduced
        done.set_result(bucket.buffer())
        return done

    ddp.register_comm_hook(None, hook)
    out = {}
    for name in ("first", "second"):
        sizes.clear()
        ddp.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        out[name] = list(sizes)
    return out


def measure_buckets_default_cap(model, bucket_cap_mb, x, y):  # type: ignore[no-untyped-def]
    return measure_buckets(model, bucket_cap_mb, x, y, pass_cap=False)


def measure_buckets_without_all_reduce(model, bucket_cap_mb, x, y):  # type: ignore[no-untyped-def]
    """The hook records the bucket and hands back the local buffer (was a false pass)."""
    return measure_buckets(model, bucket_cap_mb, x, y, reduce=False)


def measure_buckets_in_bytes(model, bucket_cap_mb, x, y):  # type: ignore[no-untyped-def]
    return measure_buckets(model, bucket_cap_mb, x, y, size=lambda b: b.nbytes)


# Right answers on real ranks are not launched a second time here: solutions/08_myths_lab.ipynb's
# graded cells run them (`PASS 8.1 (2/2)`, 8.2, 8.3, compared by nbval).
@pytest.mark.slow
@pytest.mark.parametrize(("exercise_id", "fn", "hint"), [
    ("8.1", measure_wrap_unwrapped, "without wrapping"),
    ("8.3", measure_buckets_default_cap, "did not pass bucket_cap_mb"),
    ("8.3", measure_buckets_without_all_reduce, "must still all-reduce the bucket"),
    ("8.3", measure_buckets_in_bytes, "you counted bytes")])
def test_wrong_measurements_are_caught(exercise_id: str, fn: object, hint: str) -> None:
    result = run_check(exercise_id, fn)  # type: ignore[arg-type]
    assert not result.ok
    assert result.passed == 0, result.message
    assert hint in (result.message or ""), result.message


def test_expected_values_follow_the_claims() -> None:
    for case in get_exercise("8.1").cases():
        afters = {round(r["after"], 9) for r in case.expected}
        befores = {round(r["before"], 9) for r in case.expected}
        assert len(afters) == 1
        assert len(befores) == len(case.expected)
    for case in get_exercise("8.2").cases():
        assert all(r["vs_mean"] == 0.0 and r["vs_local"] > 1e-4 for r in case.expected)
    for case in get_exercise("8.3").cases():
        assert all(r["gradients_after_are_the_mean"] for r in case.expected)
        first, second = case.expected[0]["first"], case.expected[0]["second"]
        assert len(first) == 1
        assert len(second) >= 3
        assert sum(second) == first[0]


def test_8_3_reference_is_the_myths_lab_prediction() -> None:
    """The bucket reference (torch's assignment) gives the kit's own predicted buckets."""
    from dpsim.labs.ch08_myths.myths_lab import HIDDEN, N_LAYERS, predicted_buckets

    model = make_model([HIDDEN] * (N_LAYERS + 1), 0)
    assert torch_bucket_sizes(model, 25.0, 1.0) == predicted_buckets()


def test_torch_joins_a_group_without_a_barrier_so_the_check_adds_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`ranks.join` barriers before it destroys a check's group because torch's
    init_process_group does not (unless TORCH_DIST_INIT_BARRIER=1): a rank whose function
    does no collective would otherwise close its side while a peer is still joining."""
    import inspect

    from torch.distributed import distributed_c10d

    from dpsim.course.grading import ranks

    monkeypatch.delenv("TORCH_DIST_INIT_BARRIER", raising=False)
    assert distributed_c10d._is_barrier_after_init() == 0
    assert "dist.barrier()" in inspect.getsource(ranks.join)
