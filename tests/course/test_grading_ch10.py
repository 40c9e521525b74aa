"""Chapter 10 checks: right answers pass, and each typical wrong answer is caught."""

from __future__ import annotations

import io
import os
import tempfile
from typing import Any

import torch
from torch import nn

from dpsim.course.exercises.ch10 import fsdp_chunks
from dpsim.course.grading import run_check

# --- 10.1 ----------------------------------------------------------------------------------


def _resume(weights: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor, lr: float,
            stop_at: int, *, keep_optimizer: bool = True, restart_at: int | None = None,
            rebuild: bool = True, load_model: bool = True, to_file: bool = True,
            checkpoint: bool = True, steps_after: int | None = None, zero_grad: bool = True,
            save_optimizer: bool = True) -> dict[str, Any]:
    """A learner's resume: checkpoint through a real file; the flags make the usual mistakes
    (checkpoint=False: train straight through, with no checkpoint at all)."""
    def fresh() -> tuple[nn.Linear, torch.optim.Adam]:
        model = nn.Linear(xs.shape[2], weights["weight"].shape[0])
        return model, torch.optim.Adam(model.parameters(), lr=lr)

    def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range) -> None:
        for s in steps:
            if zero_grad:
                opt.zero_grad()
            nn.functional.cross_entropy(model(xs[s]), ys[s]).backward()
            opt.step()

    model, opt = fresh()
    model.load_state_dict(weights)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    train(model, opt, range(stop_at))
    if not checkpoint:
        train(model, opt, range(stop_at, len(xs)))
        return {k: v.detach().tolist() for k, v in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as d:
        path: Any = os.path.join(d, "c.pt") if to_file else io.BytesIO()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}
                   if save_optimizer else {"model": model.state_dict()}, path)
        if rebuild:
            model, opt = fresh()
        if not to_file:
            path.seek(0)
        state = torch.load(path, weights_only=True)
    if load_model:
        model.load_state_dict(state["model"])
    if keep_optimizer:
        opt.load_state_dict(state["optimizer"])
    start = stop_at if restart_at is None else restart_at
    train(model, opt, range(start, len(xs) if steps_after is None else start + steps_after))
    return {k: v.detach().tolist() for k, v in model.state_dict().items()}


def test_10_1_a_real_checkpoint_passes() -> None:
    assert run_check("10.1", _resume).ok


def test_10_1_forgetting_the_optimizer_state_is_named() -> None:
    r = run_check("10.1", lambda *a: _resume(*a, keep_optimizer=False))
    assert not r.ok
    assert r.message is not None
    assert "optimizer state" in r.message


def test_10_1_restarting_at_step_0_is_named() -> None:
    r = run_check("10.1", lambda *a: _resume(*a, restart_at=0))
    assert r.message is not None
    assert "restarted at step 0" in r.message


def test_10_1_going_on_with_the_old_objects_earns_0() -> None:
    """Was a false pass: the old model and optimizer give the uninterrupted run's numbers."""
    r = run_check("10.1", lambda *a: _resume(*a, rebuild=False))
    assert r.passed == 0
    assert "you went on with the model or optimizer you had before" in (r.message or "")


def test_10_1_a_checkpoint_in_memory_earns_0() -> None:
    """Was a false pass: torch.save into a BytesIO (no file) and back."""
    r = run_check("10.1", lambda *a: _resume(*a, to_file=False))
    assert r.passed == 0
    assert "no checkpoint went through a file" in (r.message or "")


def test_10_1_no_checkpoint_at_all_earns_0() -> None:
    """Was a false pass: training straight through, with no checkpoint."""
    r = run_check("10.1", lambda *a: _resume(*a, checkpoint=False))
    assert r.passed == 0
    assert "no checkpoint went through a file" in (r.message or "")


def test_10_1_a_new_model_that_loaded_nothing_is_named() -> None:
    """The hint "nothing was loaded" had no answer that reached it."""
    r = run_check("10.1", lambda *a: _resume(*a, load_model=False))
    assert r.passed == 0
    assert "nothing was loaded" in (r.message or "")


def test_10_1_save_and_load_imported_by_name_are_watched() -> None:
    """`from torch import save, load` in the learner's cell: the check sees them too."""
    namespace: dict[str, Any] = {}
    exec(compile(
        "import os, tempfile\n"
        "import torch\n"
        "from torch import nn, save, load\n"
        "def resume(weights, xs, ys, lr, stop_at):\n"
        "    def fresh():\n"
        "        model = nn.Linear(xs.shape[2], weights['weight'].shape[0])\n"
        "        return model, torch.optim.Adam(model.parameters(), lr=lr)\n"
        "    def train(model, opt, steps):\n"
        "        for s in steps:\n"
        "            opt.zero_grad()\n"
        "            nn.functional.cross_entropy(model(xs[s]), ys[s]).backward()\n"
        "            opt.step()\n"
        "    model, opt = fresh()\n"
        "    model.load_state_dict(weights)\n"
        "    opt = torch.optim.Adam(model.parameters(), lr=lr)\n"
        "    train(model, opt, range(stop_at))\n"
        "    with tempfile.TemporaryDirectory() as d:\n"
        "        path = os.path.join(d, 'c.pt')\n"
        "        with open(path, 'wb') as f:\n"
        "            save({'model': model.state_dict(), 'optim': opt.state_dict()}, f)\n"
        "        del model, opt\n"
        "        model, opt = fresh()\n"
        "        state = load(path, weights_only=True)\n"
        "    model.load_state_dict(state['model'])\n"
        "    opt.load_state_dict(state['optim'])\n"
        "    train(model, opt, range(stop_at, len(xs)))\n"
        "    return {k: v.detach().tolist() for k, v in model.state_dict().items()}\n",
        "<learner>", "exec"), namespace)
    assert run_check("10.1", namespace["resume"]).ok
    assert namespace["save"] is torch.save  # put back


def test_10_1_model_and_optimizer_in_two_files_pass() -> None:
    """A right answer the check failed: the second torch.save's tensors replaced the
    first's, so the model loaded from the first file looked as if nothing was loaded."""
    def two_files(weights: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor,
                  lr: float, stop_at: int) -> dict[str, Any]:
        model = nn.Linear(xs.shape[2], weights["weight"].shape[0])
        model.load_state_dict(weights)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        steps = [range(stop_at), range(stop_at, len(xs))]
        for part in (0, 1):
            if part:
                with tempfile.TemporaryDirectory() as d:
                    torch.save(model.state_dict(), os.path.join(d, "model.pt"))
                    torch.save(opt.state_dict(), os.path.join(d, "optim.pt"))
                    model = nn.Linear(xs.shape[2], weights["weight"].shape[0])
                    opt = torch.optim.Adam(model.parameters(), lr=lr)
                    model.load_state_dict(torch.load(os.path.join(d, "model.pt")))
                    opt.load_state_dict(torch.load(os.path.join(d, "optim.pt")))
            for s in steps[part]:
                opt.zero_grad()
                nn.functional.cross_entropy(model(xs[s]), ys[s]).backward()
                opt.step()
        return {k: v.detach().tolist() for k, v in model.state_dict().items()}

    assert run_check("10.1", two_files).ok


def test_10_1_replayed_data_and_no_zero_grad_are_named() -> None:
    def replayed(*a: Any) -> dict[str, Any]:
        stop_at, steps = a[4], len(a[1])
        return _resume(*a, restart_at=0, steps_after=steps - stop_at)

    def no_zero_grad(*a: Any) -> dict[str, Any]:
        return _resume(*a, zero_grad=False)

    for fn, words in ((replayed, "data from step 0 again"),
                      (no_zero_grad, "never zeroed"),
                      (lambda *a: _resume(*a, keep_optimizer=False, save_optimizer=False),
                       "optimizer state was not saved")):
        r = run_check("10.1", fn)
        assert r.passed == 0, r.message
        assert words in (r.message or ""), r.message


def test_10_1_never_loading_fails() -> None:
    def no_load(weights: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor,
                lr: float, stop_at: int) -> dict[str, Any]:
        model = nn.Linear(xs.shape[2], weights["weight"].shape[0])
        return {k: v.detach().tolist() for k, v in model.state_dict().items()}

    assert not run_check("10.1", no_load).ok


# --- 10.2 ----------------------------------------------------------------------------------


def _reshard(shards: list[torch.Tensor], world_size: int) -> list[Any]:
    full = torch.cat(shards)
    return [c.tolist() for c in fsdp_chunks(full, world_size)]


def test_10_2_right_and_wrong_splits() -> None:
    assert run_check("10.2", _reshard).ok
    even = run_check("10.2", lambda s, n: [c.tolist() for c in torch.tensor_split(
        torch.cat(s), n)])
    assert even.message is not None
    assert "torch.chunk" in even.message
    assert not run_check("10.2", lambda s, n: [x.tolist() for x in s]).ok


def test_fsdp_chunks_matches_fsdp2s_own_split() -> None:
    """torch.distributed.fsdp's _chunk_with_empty: the split FSDP2 shards dim 0 with."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import _chunk_with_empty

    t = torch.arange(10.0).reshape(5, 2)
    for n in (2, 3, 4, 6):
        ours, theirs = fsdp_chunks(t, n), _chunk_with_empty(t, n, dim=0)
        assert [c.tolist() for c in ours] == [c.tolist() for c in theirs]


# --- 10.3 ----------------------------------------------------------------------------------


def _traffic(n: int, w: int, f: int, b: int) -> dict[str, int]:
    m, r = n * b, w // f
    return {"shard": 3 * m * (f - 1) // f, "replicate": 2 * (m // f) * (r - 1) // r}


def test_10_3_formula_and_mistakes() -> None:
    assert run_check("10.3", _traffic).ok
    whole = run_check("10.3", lambda n, w, f, b: {
        "shard": _traffic(n, w, f, b)["shard"],
        "replicate": 2 * n * b * (w // f - 1) // (w // f)})
    assert whole.message is not None
    assert "gradient shard" in whole.message
    assert not run_check("10.3", lambda n, w, f, b: {"shard": 0, "replicate": 0}).ok


def test_10_3_the_factor_3_is_named() -> None:
    """Each slip of the factor 3 has its own hint (they had the generic one), even when the
    other count is wrong too."""
    def one(n: int, w: int, f: int, b: int) -> dict[str, int]:
        return {**_traffic(n, w, f, b), "shard": n * b * (f - 1) // f}

    def whole(n: int, w: int, f: int, b: int) -> dict[str, int]:
        return {**_traffic(n, w, f, b), "shard": 3 * n * b}

    def everywhere(n: int, w: int, f: int, b: int) -> dict[str, int]:
        return {**_traffic(n, w, f, b), "replicate": 3 * _traffic(n, w, f, b)["replicate"]}

    def one_and_everywhere(n: int, w: int, f: int, b: int) -> dict[str, int]:
        return {"shard": one(n, w, f, b)["shard"], "replicate": everywhere(n, w, f, b)[
            "replicate"]}

    for fn, words in ((one, ["one transfer"]), (whole, ["not all of it"]),
                      (everywhere, ["the shard group's alone"]),
                      (one_and_everywhere, ["one transfer", "the shard group's alone"])):
        result = run_check("10.3", fn)
        assert not result.ok, fn.__name__
        assert all(w in (result.message or "") for w in words), (fn.__name__, result.message)
