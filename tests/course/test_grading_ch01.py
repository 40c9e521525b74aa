"""Chapter 1 checks: the right answers pass, and each typical wrong answer is caught."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from dpsim.course.exercises.ch01 import (
    measured_activation_bytes,
    measured_state_bytes,
    rule_activation_bytes,
)
from dpsim.course.grading import ExerciseFailed, check, core, get_exercise, run_check
from dpsim.runtime.models import layer_stack
from dpsim.sim.cost.memory import model_state_bytes


def answer_hidden(result: core.CheckResult) -> bool:
    """True if the failed case's expected value is nowhere in the message (label aside)."""
    assert result.message is not None
    body = result.message.replace(result.failed_label or "", "")
    body = re.sub(r"\(\d+ of \d+ cases passed\)", "", body)
    return re.search(rf"(?<![\w.]){re.escape(str(result.expected))}(?![\w.])", body) is None


# --- right answers -----------------------------------------------------------------------


def _sizes(module: torch.nn.Module) -> tuple[int, int]:
    params = list(module.parameters())
    return sum(p.numel() for p in params), len(params)


def training_state_bytes(module: torch.nn.Module, optimizer: str) -> int:
    n, t = _sizes(module)
    return 8 * n + {"sgd": 0, "sgd_momentum": 4 * n, "adam": 8 * n + 4 * t}[optimizer]


def training_state_bytes_measured(module: torch.nn.Module, optimizer: str) -> int:
    """Another right answer: take one real step and add up the tensors."""
    model = module
    opt = (torch.optim.Adam(model.parameters()) if optimizer == "adam" else
           torch.optim.SGD(model.parameters(), lr=0.1,
                           momentum=0.9 if optimizer == "sgd_momentum" else 0.0))
    first = model[0]  # type: ignore[index]
    x = torch.randn(2, first.in_features)
    F.cross_entropy(model(x), torch.zeros(2, dtype=torch.long)).backward()
    opt.step()
    tensors: list[torch.Tensor] = list(model.parameters())
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def mlp_activation_bytes(batch_size: int, widths: list[int]) -> int:
    return 4 * batch_size * sum(widths) + 8 * batch_size


def largest_batch(n_params: int, activation_bytes_per_sample: int, memory_bytes: int,
                  bytes_per_param: int = 16) -> int:
    free = memory_bytes - n_params * bytes_per_param
    return 0 if free < 0 else free // activation_bytes_per_sample


def test_right_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    check("1.1", training_state_bytes)
    check("1.1", training_state_bytes_measured)
    check("1.2", mlp_activation_bytes)
    check("1.3", largest_batch)
    assert capsys.readouterr().out == ("PASS 1.1 (3/3)\nPASS 1.1 (3/3)\nPASS 1.2 (3/3)\n"
                                       "PASS 1.3 (4/4)\n")


# --- the references agree with real tensors -----------------------------------------------


@pytest.mark.parametrize("optimizer", ["sgd", "sgd_momentum", "adam"])
@pytest.mark.parametrize("bias", [True, False])
def test_state_reference_matches_a_real_step(optimizer: str, bias: bool) -> None:
    module = layer_stack([7, 5, 3], bias=bias)
    n, t = _sizes(module)
    assert measured_state_bytes(module, optimizer) == model_state_bytes(
        n, t, optimizer=optimizer).model_states


def test_activation_rule_matches_saved_tensors_and_names_the_scalar() -> None:
    module = layer_stack([6, 9, 4, 3])
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    assert measured_activation_bytes(module, x, y) == rule_activation_bytes(5, [6, 9, 4, 3])
    # with 0-dim tensors kept, exactly the 4-byte total_weight the notebook mentions appears
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        F.cross_entropy(module(x), y)
    everything = sum(v for k, v in seen.items() if k not in params)
    assert everything == rule_activation_bytes(5, [6, 9, 4, 3]) + 4


# --- wrong answers ---------------------------------------------------------------------------

State = Callable[[Any, str], Any]
MOMENTS = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


def _state(fn: Callable[[int, int, str], Any]) -> State:
    return lambda module, optimizer: fn(*_sizes(module), optimizer)


WRONG_STATE: dict[str, tuple[State, str]] = {
    "no grads": (_state(lambda n, t, o: 4 * n + {"sgd": 0, "sgd_momentum": 4 * n,
                                                   "adam": 8 * n + 4 * t}[o]),
                 "forgot the gradients"),
    "no optimizer": (_state(lambda n, t, o: 8 * n), "left out the optimizer state"),
    "params only": (_state(lambda n, t, o: 4 * n), "only the parameters"),
    "elements": (_state(lambda n, t, o: (2 + MOMENTS[o]) * n + (t if o == "adam" else 0)),
                 "elements, not bytes"),
    "no steps": (_state(lambda n, t, o: (2 + MOMENTS[o]) * 4 * n), "`step` tensors"),
    "int64 steps": (_state(lambda n, t, o: (2 + MOMENTS[o]) * 4 * n
                           + (8 * t if o == "adam" else 0)), "8 bytes"),
    "step per element": (_state(lambda n, t, o: (2 + MOMENTS[o]) * 4 * n
                                + (4 * n if o == "adam" else 0)), "per parameter element"),
    "momentum for sgd": (_state(lambda n, t, o: training_state_bytes_n(n, t, o)
                                + (4 * n if o == "sgd" else 0)), "plain SGD a momentum"),
    "one adam moment": (_state(lambda n, t, o: training_state_bytes_n(n, t, o)
                               - (4 * n if o == "adam" else 0)), "one Adam moment"),
    "bits": (_state(lambda n, t, o: 8 * training_state_bytes_n(n, t, o)), "bits, not bytes"),
    "off by one": (_state(lambda n, t, o: training_state_bytes_n(n, t, o) + 1), "too large"),
}


def training_state_bytes_n(n: int, t: int, optimizer: str) -> int:
    return 8 * n + {"sgd": 0, "sgd_momentum": 4 * n, "adam": 8 * n + 4 * t}[optimizer]


def _act(extra: Callable[[int, list[int]], int]) -> Callable[[int, list[int]], int]:
    return lambda b, w: mlp_activation_bytes(b, w) + extra(b, w)


WRONG_ACT: dict[str, tuple[Callable[[int, list[int]], Any], str]] = {
    "relu twice": (_act(lambda b, w: 4 * b * sum(w[1:-1])), "ReLU output twice"),
    "no loss": (_act(lambda b, w: -4 * b * w[-1] - 8 * b), "left out the loss"),
    "no targets": (_act(lambda b, w: -8 * b), "int64 targets"),
    "int32 targets": (_act(lambda b, w: -4 * b), "4-byte integers"),
    "no input": (_act(lambda b, w: -4 * b * w[0]), "first Linear's input"),
    "logits too": (_act(lambda b, w: 4 * b * w[-1]), "logits as well"),
    "total_weight": (_act(lambda b, w: 4), "total_weight"),
    "parameters": (_act(lambda b, w: 4 * sum(w[i] * w[i + 1] + w[i + 1]
                                             for i in range(len(w) - 1))), "the parameters"),
    "elements": (lambda b, w: b * sum(w) + b, "elements, not bytes"),
    "one sample": (lambda b, w: 4 * sum(w) + 8, "one sample"),
    "bits": (lambda b, w: 8 * mlp_activation_bytes(b, w), "bits, not bytes"),
    "off by one": (_act(lambda b, w: -1), "too small"),
}


def _batch(rule: Callable[[int, int], Any]) -> Callable[..., Any]:
    """A largest_batch that computes rule(free_bytes, per_sample)."""
    def fn(n: int, per: int, mem: int, bytes_per_param: int = 16) -> Any:
        return rule(mem - n * bytes_per_param, per)
    return fn


WRONG_BATCH: dict[str, tuple[Callable[..., Any], str]] = {
    "no states": (lambda n, per, mem, bytes_per_param=16: mem // per, "forgot the model states"),
    "round up": (_batch(lambda free, per: max(0, math.ceil(free / per))), "rounded up"),
    "strict fit": (_batch(lambda free, per: max(0, (free - 1) // per)), "off-by-one"),
    "negative": (_batch(lambda free, per: free // per), "negative"),
    "ignores bpp": (lambda n, per, mem, bytes_per_param=16: largest_batch(n, per, mem),
                    "bytes_per_param"),
    "true division": (_batch(lambda free, per: max(0, free / per)), "whole number"),
    "plus one": (_batch(lambda free, per: max(0, free // per + 1)), "rounded up"),
}


@pytest.mark.parametrize(("exercise_id", "fn", "hint"), [
    *[pytest.param("1.1", fn, hint, id=f"1.1-{name}") for name, (fn, hint) in WRONG_STATE.items()],
    *[pytest.param("1.2", fn, hint, id=f"1.2-{name}") for name, (fn, hint) in WRONG_ACT.items()],
    *[pytest.param("1.3", fn, hint, id=f"1.3-{name}") for name, (fn, hint) in WRONG_BATCH.items()],
])
def test_wrong_answer_is_caught_with_its_hint(exercise_id: str, fn: Callable[..., Any],
                                              hint: str) -> None:
    result = run_check(exercise_id, fn)
    assert not result.ok
    assert result.message
    assert hint in result.message, result.message
    assert answer_hidden(result), result.message


def test_check_raises_the_same_message_every_time() -> None:
    wrong = WRONG_STATE["no grads"][0]
    with pytest.raises(ExerciseFailed) as info:
        check("1.1", wrong)
    assert str(info.value) == run_check("1.1", wrong).message


def test_every_case_of_1_3_matters() -> None:
    """Each kind of 1.3 case (default, explicit bytes_per_param, exact fit, too big) bites."""
    labels = [c.label for c in get_exercise("1.3").cases()]
    assert any("bytes_per_param=" in label for label in labels)
    expected = [c.expected for c in get_exercise("1.3").cases()]
    assert expected[-1] == 0
    assert all(e > 0 for e in expected[:-1])


# --- 1.4: a step under autocast ----------------------------------------------------------------


def autocast_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float,
                  dtype: torch.dtype | None = torch.bfloat16, cast: bool = False,
                  step: bool = True, scale: float = 1.0) -> torch.Tensor:
    if cast:
        model.to(torch.bfloat16)
        x = x.to(torch.bfloat16)
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    if step:
        torch.optim.SGD(model.parameters(), lr=lr * scale).step()
    return loss


WRONG_AUTOCAST: dict[str, tuple[Callable[..., Any], str]] = {
    "float32": (lambda m, x, y, lr: autocast_step(m, x, y, lr, dtype=None), "ran in float32"),
    "bf16 model": (lambda m, x, y, lr: autocast_step(m, x, y, lr, cast=True),
                   "cast the model to bfloat16"),
    "no step": (lambda m, x, y, lr: autocast_step(m, x, y, lr, step=False), "did not change"),
    "float16": (lambda m, x, y, lr: autocast_step(m, x, y, lr, dtype=torch.float16),
                "float16 is not bfloat16"),
    # these two got only "not the right one for this input"
    "twice the lr": (lambda m, x, y, lr: autocast_step(m, x, y, lr, scale=2.0),
                     "moved twice as far"),
    "no loss returned": (lambda m, x, y, lr: autocast_step(m, x, y, lr) and None,
                         "did not return the loss"),
    "loss.item()": (lambda m, x, y, lr: autocast_step(m, x, y, lr).item(), "loss.item()"),
}


# --- 1.5: activation checkpointing --------------------------------------------------------------


def run_blocks(blocks: list[torch.nn.Module], x: torch.Tensor, checkpointed: set[int],
               reentrant: bool = False, which: str = "chosen") -> torch.Tensor:
    from torch.utils.checkpoint import checkpoint

    for i, block in enumerate(blocks):
        chosen = {"chosen": i in checkpointed, "all": True, "none": False,
                  "others": i not in checkpointed}.get(which, False)
        if which == "no_grad" and i in checkpointed:
            with torch.no_grad():
                x = block(x)
        elif chosen and which != "no_grad":
            x = checkpoint(block, x, use_reentrant=reentrant)
        else:
            x = block(x)
    return x


WRONG_BLOCKS: dict[str, tuple[Callable[..., Any], str]] = {
    name: ((lambda b, x, c, name=name: run_blocks(b, x, c, which=name)), hint)
    for name, hint in (("none", "no block was checkpointed"), ("all", "every block"),
                       ("others", "the other blocks"), ("no_grad", "torch.no_grad()"))
}
# was a false pass (same outputs, gradients and saves here); the text asks use_reentrant=False
WRONG_BLOCKS["reentrant"] = (lambda b, x, c: run_blocks(b, x, c, reentrant=True),
                             "use_reentrant=True")


def test_1_4_and_1_5_right_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    check("1.4", autocast_step)
    check("1.5", run_blocks)
    assert capsys.readouterr().out == "PASS 1.4 (3/3)\nPASS 1.5 (3/3)\n"


@pytest.mark.parametrize(("exercise_id", "fn", "hint"), [
    *[pytest.param("1.4", fn, hint, id=f"1.4-{n}") for n, (fn, hint) in WRONG_AUTOCAST.items()],
    *[pytest.param("1.5", fn, hint, id=f"1.5-{n}") for n, (fn, hint) in WRONG_BLOCKS.items()],
])
def test_1_4_and_1_5_wrong_answers_are_caught(exercise_id: str, fn: Callable[..., Any],
                                              hint: str) -> None:
    result = run_check(exercise_id, fn)
    assert not result.ok
    assert hint in (result.message or ""), result.message


def test_1_4_tolerance_separates_bf16_from_fp32() -> None:
    """Every 1.4 case: the float32 step lies far outside the tolerance of the bf16 one."""
    from dpsim.course.exercises.ch01_autocast_checkpoint import GAP_FACTOR, STEP_ABS_TOL, torch_step

    for case in get_exercise("1.4").cases():
        fp32 = torch_step(*case.args, dtype=None)
        gap = max(abs(a - b) for pa, pb in zip(case.expected["params"], fp32["params"],
                                               strict=True) for a, b in zip(pa, pb, strict=True))
        assert gap >= GAP_FACTOR * STEP_ABS_TOL
        assert case.expected["logits_dtype"] == "torch.bfloat16"
        assert case.expected["loss_dtype"] == "torch.float32"
        assert set(case.expected["grad_dtypes"]) == {"torch.float32"}


def test_1_5_checkpointing_saves_less_and_reruns_the_chosen_blocks() -> None:
    for case in get_exercise("1.5").cases():
        chosen = case.args[-1]
        assert case.expected["forward_calls"] == [2 if i in chosen else 1
                                                  for i in range(case.args[2])]
        none = case.mistakes["no block was checkpointed: every block kept its activations"]
        assert case.expected["saved_bytes"] < none["saved_bytes"]
        assert core.same(case.expected["param_grads"], none["param_grads"], abs_tol=1e-6)


def test_1_4_and_1_5_stubs_are_reported_as_not_done() -> None:
    def stub(*args: Any) -> Any:
        raise NotImplementedError("Exercise 1.x: write your code here")

    for exercise_id in ("1.4", "1.5"):
        result = run_check(exercise_id, stub)
        assert "not done yet" in (result.message or ""), result.message
