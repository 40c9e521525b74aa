"""Chapter 3 checks: the right answers pass, and each typical wrong answer is caught."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from dpsim.course.exercises.ch03 import reference_extra_bytes, torch_chunk_sizes
from dpsim.course.grading import ExerciseFailed, check, core, run_check
from dpsim.sim.strategies.dp import scatter_sizes


def answer_hidden(result: core.CheckResult) -> bool:
    """True if the failed case's expected value is nowhere in the message (label aside)."""
    assert result.message is not None
    body = result.message.replace(result.failed_label or "", "")
    body = re.sub(r"\(\d+ of \d+ cases passed\)", "", body)
    return str(result.expected) not in body


# --- right answers -------------------------------------------------------------------------


def chunk_sizes(batch_size: int, n_devices: int) -> list[int]:
    size = -(-batch_size // n_devices)
    return [min(size, batch_size - start) for start in range(0, batch_size, size)]


def scatter(batch: torch.Tensor, n_devices: int) -> list[torch.Tensor]:
    size = -(-batch.shape[0] // n_devices)
    return [batch[i:i + size] for i in range(0, batch.shape[0], size)]


def gather(outputs: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(outputs, dim=0)


def device0_extra_bytes(batch_size: int, out_features: int, n_params: int,
                        n_param_tensors: int) -> int:
    adam = 8 * n_params + 4 * n_param_tensors
    gathered = 4 * batch_size * out_features
    return adam + gathered + gathered + 8 * batch_size


def test_right_answers_pass(capsys: pytest.CaptureFixture[str]) -> None:
    check("3.1", chunk_sizes)
    check("3.2", scatter)
    check("3.2", lambda x, n: list(x.chunk(n)))
    check("3.3", gather)
    check("3.4", device0_extra_bytes)
    assert capsys.readouterr().out == ("PASS 3.1 (7/7)\nPASS 3.2 (4/4)\n"
                                       "PASS 3.2 (4/4)\nPASS 3.3 (3/3)\nPASS 3.4 (3/3)\n")


def test_references_agree_with_torch() -> None:
    for b in range(1, 40):
        for n in range(1, 9):
            assert torch_chunk_sizes(b, n) == scatter_sizes(b, n) == chunk_sizes(b, n)
    assert reference_extra_bytes(8, 10, 100, 2) == 8 * 100 + 8 + 2 * 4 * 8 * 10 + 64


# --- wrong answers -------------------------------------------------------------------------

WRONG: list[tuple[str, Callable[..., Any], str]] = [
    ("3.1", lambda b, n: [b // n + (r < b % n) for r in range(n)], "spread the remainder"),
    ("3.1", lambda b, n: chunk_sizes(b, n) + [0] * (n - len(chunk_sizes(b, n))),
     "you kept empty chunks"),  # was "your list has 4 entries; it needs 2"
    ("3.1", lambda b, n: [b // n] * n, "dropped the remainder"),
    # were false passes: torch's own split answers the exercise
    ("3.1", lambda b, n: [int(c.shape[0]) for c in torch.arange(b).chunk(n)],
     "not to call torch.Tensor.chunk"),
    ("3.1", lambda b, n: [len(c) for c in torch.chunk(torch.arange(b), n)],
     "not to call torch.chunk"),
    ("3.1", lambda b, n: [-(-b // n)] * n, "add up to the batch"),
    ("3.1", lambda b, n: chunk_sizes(b, n)[::-1], "reverse order"),
    ("3.2", lambda x, n: list(torch.tensor_split(x, n)), "tensor_split"),
    ("3.2", lambda x, n: list(x.chunk(n, dim=1)), "entries; it needs"),
    ("3.2", lambda x, n: list(reversed(x.chunk(n))), "out of order"),
    ("3.2", lambda x, n: x.chunk(n)[0], "list"),
    ("3.3", lambda outs: torch.cat(outs[::-1]), "out of order"),
    ("3.3", lambda outs: torch.stack(outs), "entries; it needs 10"),
    ("3.3", lambda outs: sum(outs), "entries; it needs 10"),
    ("3.3", lambda outs: None, "return"),
    ("3.4", lambda b, c, p, t: 4 * b * c + 4 * b * c + 8 * b, "optimizer state"),
    ("3.4", lambda b, c, p, t: device0_extra_bytes(b, c, p, t) - 4 * t, "`step` tensors"),
    ("3.4", lambda b, c, p, t: 8 * p + 4 * t + 4 * b * c, "what the loss keeps"),
    ("3.4", lambda b, c, p, t: device0_extra_bytes(b, c, p, t) - 8 * b, "int64 targets"),
    ("3.4", lambda b, c, p, t: device0_extra_bytes(b, c, p, t) + 4 * p,
     "parameters or the gradients"),
    ("3.4", lambda b, c, p, t: device0_extra_bytes(b, c, p, t) + 1, "too large"),
]


@pytest.mark.parametrize(("exercise_id", "fn", "hint"), [
    pytest.param(i, fn, hint, id=f"{i}-{n}") for n, (i, fn, hint) in enumerate(WRONG)])
def test_wrong_answer_is_caught_with_its_hint(exercise_id: str, fn: Callable[..., Any],
                                              hint: str) -> None:
    with pytest.raises(ExerciseFailed) as info:
        check(exercise_id, fn)
    assert hint in str(info.value), str(info.value)
    result = run_check(exercise_id, fn)
    assert answer_hidden(result), result.message
    assert str(info.value) == result.message


# --- 3.5: DataParallel's forward by hand -----------------------------------------------------


def data_parallel(module: torch.nn.Module, x: torch.Tensor, device_ids: list[int],
                  output_device: int | None = None, dim: int = 0, *, slip: str = ""
                  ) -> tuple[torch.Tensor, Any]:
    import threading

    from dpsim.labs.ch03_data_parallel.dp_reenact import replicate_module

    if output_device is None and slip != "no_default":
        output_device = device_ids[0]
    cut = 0 if slip == "dim0" else dim
    inputs = x.chunk(len(device_ids), cut)
    if len(device_ids) == 1 and slip != "always_replicate":
        return module(inputs[0]), output_device
    params = list(module.parameters())
    copies = [[p.detach().requires_grad_() if slip == "detached" else p.clone() for p in params]
              for _ in inputs]
    replicas = [replicate_module(module, c) for c in copies]
    if slip == "shared":  # one replica for every thread (was a false pass)
        replicas = [replicas[0]] * len(replicas)
    outputs: list[Any] = [None] * len(inputs)

    def apply(i: int) -> None:
        outputs[i] = replicas[i](inputs[i])

    if slip == "no_threads" or len(inputs) == 1:
        for i in range(len(inputs)):
            apply(i)
    else:
        threads = [threading.Thread(target=apply, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if slip == "reversed":
        outputs.reverse()
    return torch.cat(outputs, cut), output_device


WRONG_DP = [("no_default", "device_ids[0]"), ("detached", "p.clone()"),
            ("no_threads", "one thread per replica"), ("always_replicate", "calls the module"),
            ("dim0", "along `dim`"),
            ("reversed", "out of order"),  # got only "not the right one for this input"
            ("shared", "the same replica")]  # passed 5/5


def test_3_5_right_answer_passes(capsys: pytest.CaptureFixture[str]) -> None:
    check("3.5", data_parallel)
    assert capsys.readouterr().out == "PASS 3.5 (5/5)\n"


@pytest.mark.parametrize(("slip", "hint"), WRONG_DP, ids=[s for s, _ in WRONG_DP])
def test_3_5_wrong_answers_are_caught(slip: str, hint: str) -> None:
    result = run_check("3.5", lambda m, x, ids, out, dim: data_parallel(m, x, ids, out, dim,
                                                                        slip=slip))
    assert not result.ok
    assert result.passed < result.total
    assert hint in (result.message or ""), result.message


def test_3_5_reference_is_torch_on_one_device() -> None:
    """Every 3.5 case's expected outputs and gradients are one device's, within the tolerance."""
    from dpsim.course.exercises.ch03_dp_forward import ABS_TOL, build
    from dpsim.course.grading import get_exercise

    for case in get_exercise("3.5").cases():
        module, x = build(case.args[0])
        out = module(x)
        out.square().mean().backward()
        assert torch.allclose(out.detach().reshape(-1), torch.tensor(case.expected["output"]),
                              atol=ABS_TOL, rtol=0)
        for p, g in zip(module.parameters(), case.expected["param_grads"], strict=True):
            assert p.grad is not None
            assert torch.allclose(p.grad.reshape(-1), torch.tensor(g), atol=ABS_TOL, rtol=0)


def test_3_5_stub_is_reported_as_not_done() -> None:
    def data_parallel(*args: Any) -> Any:
        raise NotImplementedError("Exercise 3.5: write your code here")

    assert "not done yet" in (run_check("3.5", data_parallel).message or "")
