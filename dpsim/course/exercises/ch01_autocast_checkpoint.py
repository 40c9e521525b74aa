"""Exercises 1.4 and 1.5: a training step under autocast, and activation checkpointing.

The learner's function runs on a small model built from a seed (`build_mlp`,
`build_blocks`), the same here and in the checking process; the runners return plain data
(parameters after the step, dtypes seen by hooks, gradients, bytes autograd saved,
measured with `dpsim.runtime.measure.saved_tensors`). The expected answers are torch
itself doing the same step here, and the usual slips are torch doing the slip.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from dpsim.course.grading.registry import Case, exercise
from dpsim.runtime.measure import saved_tensors
from dpsim.runtime.models import layer_stack

# bf16 keeps 8 significant bits (relative rounding 2**-9); a float32 step differs from the
# bf16 one by about lr * |grad| * 2**-9 per element, far above float32 rounding. The cases
# are chosen so that this gap is at least GAP_FACTOR x the tolerance.
STEP_ABS_TOL = 1e-6
GAP_FACTOR = 50


def build_mlp(widths: list[int], seed: int) -> nn.Sequential:
    """Linear, ReLU, ..., Linear in fp32 with weights fixed by `seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return layer_stack(widths)


def batch(widths: list[int], size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of inputs and class labels fixed by `seed`."""
    gen = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(size, widths[0], generator=gen) * 2,
            torch.randint(0, widths[-1], (size,), generator=gen))


def _name(value: Any) -> str:
    return str(value.dtype) if isinstance(value, torch.Tensor) else type(value).__name__


def run_autocast_step(fn: Callable[..., Any], widths: list[int], size: int, seed: int,
                      lr: float) -> dict[str, Any]:
    """fn(model, x, y, lr) on a fresh model; what the step left behind, as plain data."""
    model = build_mlp(widths, seed)
    x, y = batch(widths, size, seed)
    seen: list[str] = []
    model.register_forward_hook(lambda _m, _i, out: seen.append(_name(out)))
    loss = fn(model, x, y, lr)
    params = list(model.parameters())
    return {"params": [p.detach().float().reshape(-1).tolist() for p in params],
            "param_dtypes": [str(p.dtype) for p in params],
            "grad_dtypes": [_name(p.grad) for p in params],
            "logits_dtype": seen[-1] if seen else "the model was not called",
            "loss_dtype": _name(loss)}


# Case.call takes the runner by its own signature, call(fn, *args)
AUTOCAST_RUNNER: Callable[..., Any] = run_autocast_step


def torch_step(widths: list[int], size: int, seed: int, lr: float, *,
               dtype: torch.dtype | None = torch.bfloat16, cast_model: bool = False,
               step: bool = True, lr_scale: float = 1.0) -> dict[str, Any]:
    """The step as torch does it (autocast to `dtype`; None: no autocast), or a slip
    (`lr_scale` times the step)."""

    def learner(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> Any:
        if cast_model:
            model.to(torch.bfloat16)
            x = x.to(torch.bfloat16)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        if step:
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p.sub_(lr * lr_scale * p.grad)
        return loss

    return run_autocast_step(learner, widths, size, seed, lr)


def _gap(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max(abs(u - v) for pa, pb in zip(a["params"], b["params"], strict=True)
               for u, v in zip(pa, pb, strict=True))


@exercise("1.4", function="autocast_step", title="A training step under autocast", points=2)
def _autocast_cases(rng: random.Random) -> Iterator[Case]:
    made = 0
    while made < 3:
        widths = [rng.randint(3, 8) for _ in range(rng.randint(2, 3) + 1)]
        size, seed, lr = rng.randint(4, 16), rng.randint(0, 10**6), rng.choice([0.5, 1.0])
        expected = torch_step(widths, size, seed, lr)
        fp32 = torch_step(widths, size, seed, lr, dtype=None)
        if _gap(expected, fp32) < GAP_FACTOR * STEP_ABS_TOL:
            continue  # this input cannot tell bf16 from fp32: draw another
        made += 1
        yield Case(
            f"widths={widths}, batch of {size}, seed={seed}, lr={lr}",
            args=(widths, size, seed, lr), expected=expected, abs_tol=STEP_ABS_TOL,
            call=AUTOCAST_RUNNER,
            mistakes={
                "the forward pass ran in float32: wrap the model call and the loss in "
                "`with torch.autocast('cpu', dtype=torch.bfloat16):`": fp32,
                "you cast the model to bfloat16; autocast keeps the parameters (and so the "
                "gradients and the update) in float32 and casts per operation":
                    torch_step(widths, size, seed, lr, cast_model=True),
                "the parameters did not change: after backward, update each p with "
                "p -= lr * p.grad (under torch.no_grad()) or an SGD optimizer's step()":
                    torch_step(widths, size, seed, lr, step=False),
                "float16 is not bfloat16: on the CPU autocast takes dtype=torch.bfloat16":
                    torch_step(widths, size, seed, lr, dtype=torch.float16),
                "the parameters moved twice as far as one step of lr * p.grad: did you "
                "update them twice (by hand and with an optimizer's step()), or double lr?":
                    {**expected, "params": torch_step(widths, size, seed, lr,
                                                      lr_scale=2.0)["params"]},
                "your function did not return the loss: end it with `return loss`":
                    {**expected, "loss_dtype": "NoneType"},
                "you returned loss.item(), a Python float: return the loss tensor itself":
                    {**expected, "loss_dtype": "float"},
            },
        )


# --- 1.5 ------------------------------------------------------------------------------------


def build_blocks(width: int, hidden: int, n_blocks: int, seed: int) -> list[nn.Module]:
    """n_blocks blocks Linear(width, hidden), ReLU, Linear(hidden, width), fixed by seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return [layer_stack([width, hidden, width]) for _ in range(n_blocks)]


def run_blocks_measured(fn: Callable[..., Any], width: int, hidden: int, n_blocks: int,
                        size: int, seed: int, checkpointed: list[int]) -> dict[str, Any]:
    """fn(blocks, x, checkpointed) under the saved-bytes counter, then a backward pass;
    the output, gradients, bytes saved and how often each block's forward ran."""
    blocks = build_blocks(width, hidden, n_blocks, seed)
    x = torch.randn(size, width, generator=torch.Generator().manual_seed(seed + 1))
    x.requires_grad_(True)
    params = [p for b in blocks for p in b.parameters()]
    calls = [0] * n_blocks  # forward runs per block: a checkpointed one runs again in backward
    for i, block in enumerate(blocks):
        block.register_forward_pre_hook(lambda _m, _a, i=i: calls.__setitem__(i, calls[i] + 1))
    with saved_tensors([*params, x], scalars=False) as saved:
        out = fn(blocks, x, set(checkpointed))
    if not isinstance(out, torch.Tensor):
        return {"output": _name(out)}
    reentrant = _reentrant(out)
    if out.requires_grad:
        out.square().mean().backward()
    grads = [p.grad.reshape(-1).tolist() if p.grad is not None else None for p in params]
    return {"output": out.detach().reshape(-1).tolist(),
            "input_grad": x.grad.reshape(-1).tolist() if x.grad is not None else None,
            "param_grads": grads, "saved_bytes": saved.nbytes, "forward_calls": calls,
            "reentrant_checkpoint": reentrant}


def _reentrant(out: torch.Tensor) -> bool:
    """True if the autograd graph behind `out` holds a reentrant checkpoint
    (`use_reentrant=True`: torch's CheckpointFunction)."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ == "CheckpointFunctionBackward":
            return True
        todo.extend(next_fn for next_fn, _ in node.next_functions)
    return False


BLOCKS_RUNNER: Callable[..., Any] = run_blocks_measured


def torch_blocks(blocks: list[nn.Module], x: torch.Tensor, checkpointed: set[int]
                 ) -> torch.Tensor:
    """The reference: torch.utils.checkpoint on the blocks named, the others called."""
    for i, block in enumerate(blocks):
        x = checkpoint(block, x, use_reentrant=False) if i in checkpointed else block(x)
    return x


def _detached_blocks(blocks: list[nn.Module], x: torch.Tensor, checkpointed: set[int]
                     ) -> torch.Tensor:
    """A slip: the checkpointed blocks run under no_grad (nothing flows back through them)."""
    for i, block in enumerate(blocks):
        if i in checkpointed:
            with torch.no_grad():
                x = block(x)
        else:
            x = block(x)
    return x


@exercise("1.5", function="run_blocks", title="Activation checkpointing", points=2)
def _checkpoint_cases(rng: random.Random) -> Iterator[Case]:
    for n_blocks in (3, 4, 2):
        width, hidden = rng.randint(4, 8), rng.randint(12, 32)
        size, seed = rng.randint(3, 8), rng.randint(0, 10**6)
        chosen = sorted(rng.sample(range(n_blocks), rng.randint(1, n_blocks - 1)))
        args = (width, hidden, n_blocks, size, seed, chosen)
        expected = run_blocks_measured(torch_blocks, *args)
        plain = run_blocks_measured(torch_blocks, *args[:-1], [])
        if not expected["saved_bytes"] < plain["saved_bytes"]:
            raise RuntimeError("checkpointing did not lower the saved bytes; please report")
        others = [i for i in range(n_blocks) if i not in chosen]
        yield Case(
            f"{n_blocks} blocks Linear({width}, {hidden}), ReLU, Linear({hidden}, {width}); "
            f"batch of {size}; checkpointed={set(chosen)}",
            args=args, expected=expected, abs_tol=1e-6, call=BLOCKS_RUNNER,
            mistakes={
                "no block was checkpointed: every block kept its activations":
                    plain,
                "you checkpointed every block; only those in `checkpointed` should be":
                    run_blocks_measured(torch_blocks, *args[:-1], list(range(n_blocks))),
                "you checkpointed the other blocks (i not in checkpointed)":
                    run_blocks_measured(torch_blocks, *args[:-1], others),
                "the checkpointed blocks ran under torch.no_grad(): their gradients are "
                "lost; torch.utils.checkpoint.checkpoint recomputes them in backward":
                    run_blocks_measured(_detached_blocks, *args),
                "you used the reentrant checkpoint (use_reentrant=True); pass "
                "use_reentrant=False, the version torch recommends (it also works when the "
                "input needs no gradient, and with hooks)":
                    dict(expected, reentrant_checkpoint=True),
            },
        )
