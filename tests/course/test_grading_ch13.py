"""Chapter 13 checks: right answers pass, and each typical wrong answer is caught with its
hint (the mean of means, a count that is not the global one, a resume that replays or skips,
an evaluation that counts the sampler's copies)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dpsim.course.grading import run_check

# --- 13.1 ----------------------------------------------------------------------------------


def _losses(micro_logits: list[torch.Tensor], micro_targets: list[torch.Tensor], pad_id: int,
            how: str = "right") -> list[torch.Tensor]:
    """A learner's 13.1: `how` picks the normalisation (the right one or a usual mistake)."""
    n, m = dist.get_world_size(), len(micro_targets)
    ignore = -100 if how == "pad counted" else pad_id
    real = [(t != ignore).sum() if how != "pad counted" else torch.tensor(t.numel())
            for t in micro_targets]
    sums = [F.cross_entropy(z.flatten(0, 1), t.flatten(), ignore_index=ignore, reduction="sum")
            for z, t in zip(micro_logits, micro_targets, strict=True)]
    if how == "mean of means":
        return [s / c / m for s, c in zip(sums, real, strict=True)]
    if how == "rank count":
        return [s / sum(real) for s in sums]
    if how == "micro count":
        out = []
        for s, c in zip(sums, real, strict=True):
            c = c.clone()
            dist.all_reduce(c)
            out.append(s * n / (m * c))
        return out
    total = sum(real)
    dist.all_reduce(total)
    scale = 1 if how == "no world_size" else n
    return [s * scale / total for s in sums]


@pytest.mark.slow  # gloo ranks
def test_13_1_right_answer_passes() -> None:
    r = run_check("13.1", _losses)
    assert r.ok, r.message


@pytest.mark.slow
@pytest.mark.parametrize(("how", "hint"), [
    ("mean of means", "the mean of means"),
    ("rank count", "each rank divided by its own token count"),
    ("micro count", "each micro-batch divided by its own global count"),
    ("no world_size", "not multiplied by world_size"),
    ("pad counted", "the padding was counted"),
])
def test_13_1_wrong_normalisations_fail_with_their_hint(how: str, hint: str) -> None:
    r = run_check("13.1", lambda z, t, p: _losses(z, t, p, how))
    assert r.passed == 0
    assert hint in (r.message or ""), r.message


@pytest.mark.slow
def test_13_1_one_loss_for_the_step_is_refused_in_words() -> None:
    r = run_check("13.1", lambda z, t, p: sum(_losses(z, t, p)))
    assert r.passed == 0
    assert "one loss per micro-batch" in (r.message or ""), r.message


# --- 13.2 ----------------------------------------------------------------------------------


def _resume(rank: int, world_size: int, n_samples: int, batch_size: int, seed: int,
            steps: int, path: str, resume: bool, *, keep_position: bool = True,
            keep_epoch: bool = True, keep_rng: bool = True, own_generator: bool = True,
            set_epoch: bool = True) -> list[tuple[list[int], float]]:
    """A learner's 13.2; each flag set to False makes one usual mistake."""
    dataset = TensorDataset(torch.arange(n_samples))
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, world_size, rank,
                                                          shuffle=True, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                        generator=torch.Generator() if own_generator else None)
    epoch, position = 0, 0
    if resume:
        state = torch.load(path, weights_only=True)
        epoch = state["epoch"] if keep_epoch else 0
        position = state["position"] if keep_position else 0
        if keep_rng:
            torch.set_rng_state(state["rng"])
        else:
            torch.manual_seed(seed + rank)
    else:
        torch.manual_seed(seed + rank)
    done: list[tuple[list[int], float]] = []
    while len(done) < steps:
        if set_epoch or not resume:
            sampler.set_epoch(epoch)
        for i, (ids,) in enumerate(loader):
            if i < position:
                continue
            done.append((ids.tolist(), torch.rand(()).item()))
            position = i + 1
            if len(done) == steps:
                break
        else:
            epoch, position = epoch + 1, 0
    torch.save({"epoch": epoch, "position": position, "rng": torch.get_rng_state()}, path)
    return done


def test_13_2_right_answer_passes() -> None:
    r = run_check("13.2", _resume)
    assert r.ok, r.message


@pytest.mark.parametrize(("flags", "hint"), [
    ({"keep_position": False, "keep_epoch": False}, "restarted at step 0"),
    ({"keep_position": False}, "started its epoch from the first batch"),
    ({"keep_rng": False}, "the random generator was not restored"),
    ({"own_generator": False}, "generator=torch.Generator()"),
    ({"set_epoch": False}, "did not call sampler.set_epoch(epoch)"),
])
def test_13_2_a_resume_that_replays_skips_or_redraws_fails_with_its_hint(
        flags: dict[str, Any], hint: str) -> None:
    r = run_check("13.2", lambda *a: _resume(*a, **flags))
    assert not r.ok
    assert hint in (r.message or ""), r.message


def test_13_2_replaying_from_step_0_is_counted_as_replayed_samples() -> None:
    """The uninterrupted ids, against those of a resume from step 0: the chapter's counter
    sees the replayed samples and the skipped ones."""
    from dpsim.course.exercises.ch13 import reference_run, uninterrupted_plan
    from dpsim.labs.ch13_training_at_scale.sample_log import replayed_and_skipped

    straight = reference_run(24, 2, 0, 4, 7, 8)["ids"]
    plan = uninterrupted_plan(24, 2, 4, 8)
    again = reference_run(24, 2, 0, 4, 7, 8, plan=plan[:4] + plan[:4])["ids"]
    reference = [i for b in straight for i in b]
    replayed, skipped = replayed_and_skipped([i for b in again for i in b], reference)
    assert replayed == skipped > 0
    assert replayed_and_skipped(reference, reference) == (0, 0)


# --- 13.3 ----------------------------------------------------------------------------------


def _evaluate(model: torch.nn.Module, dataset: TensorDataset, rank: int, world_size: int,
              how: str = "right") -> tuple[int, int]:
    drop_last = how == "drop_last"
    idx = torch.tensor(list(DistributedSampler(dataset, world_size, rank, shuffle=False,
                                               drop_last=drop_last)))
    real = torch.arange(len(idx)) * world_size + rank < len(dataset)
    if how in ("copies", "drop_last"):
        real = torch.ones_like(real)
    x, labels = dataset[idx[real]]
    with torch.no_grad():
        counts = torch.stack([(model(x).argmax(1) == labels).sum(), real.sum()])
    if how != "local":
        dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


@pytest.mark.slow
def test_13_3_right_answer_passes() -> None:
    r = run_check("13.3", _evaluate)
    assert r.ok, r.message


@pytest.mark.slow
@pytest.mark.parametrize(("how", "hint"), [
    ("copies", "samples were counted twice"),
    ("drop_last", "samples were skipped"),
    ("local", "each rank returned its own counts"),
])
def test_13_3_wrong_evaluations_fail_with_their_hint(how: str, hint: str) -> None:
    r = run_check("13.3", lambda m, d, r, n: _evaluate(m, d, r, n, how))
    assert not r.ok
    assert hint in (r.message or ""), r.message
