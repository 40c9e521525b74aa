"""Exercise 3.5: DataParallel's forward written by hand over virtual devices.

torch.nn.parallel's scatter, replicate, parallel_apply and gather refuse CPU tensors, so
the learner writes them the way `dpsim.labs.ch03_data_parallel.dp_reenact` re-enacts them: device
ids are
labels, `x.chunk(n, dim)` scatters, `replicate_module` with parameter copies that keep
autograd replicates, one Python thread per replica applies, `torch.cat(..., dim)` gathers.
The runner builds the module from a seed, watches every call of it (a forward pre-hook,
which the replicas share: which thread, which module, the original or a replica, how many
samples along `dim`), then runs a backward pass; it returns plain data. The expected answer is the
same measurement of a reference written here, checked against one device doing the whole
batch (outputs and gradients), and the device rule of torch's own `data_parallel`.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from dpsim.course.grading.registry import Case, exercise
from dpsim.labs.ch03_data_parallel.dp_reenact import replicate_module
from dpsim.runtime.models import layer_stack

ABS_TOL = 1e-5  # chunked matmuls and gradients summed over replicas: float32 rounding only


class TimeMix(nn.Module):
    """A layer over (time, batch, features) that mixes along time (dimension 0)."""

    def __init__(self, features: int, out: int) -> None:
        super().__init__()
        self.proj = nn.Linear(features, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return h - h.mean(0, keepdim=True)


def build(spec: dict[str, Any]) -> tuple[nn.Module, torch.Tensor]:
    """The module and input a case names (fixed by spec["seed"])."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec["seed"])
        if spec["model"] == "time_mix":
            module: nn.Module = nn.Sequential(TimeMix(spec["features"], 6), nn.Tanh())
            x = torch.randn(spec["time"], spec["batch"], spec["features"])
        else:
            module = layer_stack([spec["features"], 8, 3])
            x = torch.randn(spec["batch"], spec["features"])
    return module, x.requires_grad_(True)


def run_data_parallel(fn: Callable[..., Any], spec: dict[str, Any], device_ids: list[int],
                      output_device: int | None, dim: int) -> dict[str, Any]:
    """fn(module, x, device_ids, output_device, dim) watched; plain data of what it did."""
    module, x = build(spec)
    # threads and modules kept: their ids stay unique
    calls: list[tuple[threading.Thread, bool, int, nn.Module]] = []
    lock = threading.Lock()

    def watch(m: nn.Module, args: tuple[Any, ...]) -> None:
        with lock:
            calls.append((threading.current_thread(), m is module, int(args[0].shape[dim]), m))

    module.register_forward_pre_hook(watch)
    answer = fn(module, x, list(device_ids), output_device, dim)
    if not (isinstance(answer, tuple) and len(answer) == 2
            and isinstance(answer[0], torch.Tensor)):
        return {"returned": type(answer).__name__}
    out, device = answer
    out.square().mean().backward()
    params = list(module.parameters())
    return {"output": out.detach().reshape(-1).tolist(), "shape": list(out.shape),
            "device": device,
            "param_grads": [None if p.grad is None else p.grad.reshape(-1).tolist()
                            for p in params],
            "input_grad": None if x.grad is None else x.grad.reshape(-1).tolist(),
            "calls": len(calls),
            # one chunk: torch's parallel_apply runs it in this thread; either way is fine
            "threads": len({id(c[0]) for c in calls}) if len(calls) > 1 else 1,
            "original_called": sum(c[1] for c in calls),
            # one replica per chunk: threads that share one module share its state
            "replicas_called": len({id(c[3]) for c in calls}),
            "chunk_sizes": sorted(c[2] for c in calls)}


# Case.call takes the runner by its own signature, call(fn, *args)
RUNNER: Callable[..., Any] = run_data_parallel


def reference(module: nn.Module, x: torch.Tensor, device_ids: list[int],
              output_device: int | None, dim: int, *, slip: str = "") -> tuple[Any, Any]:
    """torch.nn.parallel.data_parallel's forward on virtual devices (or a named slip)."""
    if output_device is None and slip != "no_default":
        output_device = device_ids[0]
    inputs = list(x.chunk(len(device_ids), 0 if slip == "dim0" else dim))
    if len(device_ids) == 1 and slip != "always_replicate":
        return module(inputs[0]), output_device
    params = list(module.parameters())
    replicas = [replicate_module(module, [p.detach().requires_grad_() if slip == "detached"
                                          else p.clone() for p in params])
                for _ in inputs[:1 if slip == "shared" else None]]
    if slip == "shared":  # one replica for every thread
        replicas = replicas * len(inputs)
    outputs: list[Any] = [None] * len(inputs)

    def apply(i: int) -> None:
        outputs[i] = replicas[i](inputs[i])

    if len(inputs) > 1 and slip != "no_threads":
        threads = [threading.Thread(target=apply, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for i in range(len(inputs)):
            apply(i)
    if slip == "reversed":
        outputs.reverse()
    return torch.cat(outputs, 0 if slip == "dim0" else dim), output_device


def _case_maker(slip: str) -> Callable[..., Any]:
    def fn(module: nn.Module, x: torch.Tensor, device_ids: list[int],
           output_device: int | None, dim: int) -> tuple[Any, Any]:
        return reference(module, x, device_ids, output_device, dim, slip=slip)
    return fn


def _agrees_with_one_device(spec: dict[str, Any], got: dict[str, Any]) -> bool:
    module, x = build(spec)
    out = module(x)
    out.square().mean().backward()
    pairs = [(out.detach(), got["output"]), (x.grad, got["input_grad"])]
    pairs += [(p.grad, g) for p, g in zip(module.parameters(), got["param_grads"], strict=True)]
    return all(torch.allclose(a.reshape(-1), torch.tensor(b), atol=ABS_TOL, rtol=0)
               for a, b in pairs)


SHARED = ("every thread ran the same replica: make one replica per chunk (torch's replicate "
          "gives each device its own copy of the module); threads sharing one module share "
          "its state, its buffers and whatever a forward stores on it")


@exercise("3.5", function="data_parallel", title="DataParallel's forward by hand", points=3)
def _data_parallel_cases(rng: random.Random) -> Iterator[Case]:
    n = rng.randint(3, 4)
    shapes = [  # (model, batch, device_ids, output_device, dim)
        ("mlp", rng.randint(n + 1, 4 * n), list(range(n)), None, 0),
        ("mlp", 2, [0, 1, 2, 3], rng.randint(1, 3), 0),
        ("time_mix", rng.randint(5, 9), [1, 3], None, 1),
        ("mlp", rng.randint(2, 6), [rng.randint(1, 5)], None, 0),
        ("mlp", 1, [2, 0], None, 0),
    ]
    for model, size, ids, out_dev, dim in shapes:
        spec = {"model": model, "seed": rng.randint(0, 10**6), "batch": size,
                "features": rng.randint(3, 6), "time": rng.randint(3, 5)}
        args = (spec, ids, out_dev, dim)
        expected = run_data_parallel(reference, *args)
        if not _agrees_with_one_device(spec, expected):
            raise RuntimeError(f"the DataParallel reference disagrees with one device for "
                               f"{spec}; please report this")
        shape = (f"x of shape ({spec['time']}, {size}, {spec['features']}) (batch in dim 1)"
                 if model == "time_mix" else f"x of shape ({size}, {spec['features']})")
        mistakes = {
            "output_device defaults to device_ids[0] (as torch's data_parallel)":
                run_data_parallel(_case_maker("no_default"), *args),
            "the replicas' parameters were detached: copy them with p.clone() (as "
            "Broadcast does), so that backward sums every replica's gradient into the "
            "original parameters": run_data_parallel(_case_maker("detached"), *args),
            "the replicas ran one after the other in this thread; parallel_apply starts one "
            "thread per replica and joins them": run_data_parallel(_case_maker("no_threads"),
                                                                  *args),
            "with one device id DataParallel calls the module itself: no replica, no "
            "gather": run_data_parallel(_case_maker("always_replicate"), *args),
        }
        if len(ids) > 1:
            mistakes[SHARED] = run_data_parallel(_case_maker("shared"), *args)
            mistakes["the gathered output is out of order: torch.cat the replicas' outputs "
                     "in the order of device_ids (keep each output at its chunk's index, "
                     "whichever thread finishes first)"] = run_data_parallel(
                _case_maker("reversed"), *args)
        if dim:
            mistakes["scatter and gather along `dim`; you cut along dimension 0"] = \
                run_data_parallel(_case_maker("dim0"), *args)
        yield Case(f"data_parallel(module, x, device_ids={ids}, output_device={out_dev}, "
                   f"dim={dim}) with {model}, {shape}", args=args, expected=expected,
                   abs_tol=ABS_TOL, call=RUNNER, mistakes=mistakes)
