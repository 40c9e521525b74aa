"""DataParallel re-enacted on the CPU: N virtual devices, Python threads, real autograd.

On a machine without CUDA, `nn.DataParallel` has no device_ids and simply calls the
module, and torch's scatter / replicate / parallel_apply / gather refuse CPU tensors.
`reenact_step` runs the same algorithm over N *virtual devices* with real tensors and
autograd, one phase at a time, and records every phase in a Trace labelled "re-enacted"
(real tensors and threads on stand-in devices: timed here, but not a GPU measurement):

scatter (`x.chunk(N)`, copies for devices 1..N-1) -> replicate (parameter copies and
shallow module copies, as torch.nn.parallel.replicate does) -> parallel_apply (one
Python thread per device) -> gather (torch.cat on device 0) -> loss on device 0 ->
backward (the output gradient split back, one thread per device, as autograd runs one
thread per GPU) -> reduce (replica gradients summed into device 0's .grad) -> optimizer.

Memory per virtual device is the bytes of the real tensors that device would hold
(parameters, input chunk, what autograd saved, outputs, gradients).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from dpsim.runtime.dp_step import (
    Clock,
    DPStepResult,
    LossFn,
    check_batch,
    step_result,
)
from dpsim.runtime.measure import optimizer_tensors, saved_tensors, storage_bytes, tensor_bytes
from dpsim.sim import Event, Trace


def replicate_module(module: nn.Module, params: list[torch.Tensor]) -> nn.Module:
    """A shallow copy of `module` whose parameters are `params` (torch's replicate, one device)."""
    originals = list(module.parameters())
    index = {id(p): i for i, p in enumerate(originals)}
    copies: dict[int, nn.Module] = {}
    for m in module.modules():
        copies[id(m)] = m._replicate_for_data_parallel()
    for m in module.modules():
        replica = copies[id(m)]
        for key, child in m._modules.items():
            setattr(replica, key, None if child is None else copies[id(child)])
        for key, p in m._parameters.items():
            setattr(replica, key, None if p is None else params[index[id(p)]])
    return copies[id(module)]


def run_threads(fns: Sequence[Callable[[], None]]) -> None:
    """Run one thread per function (parallel_apply); re-raise the first error.

    Each thread computes with one intra-op thread (the virtual devices share this CPU;
    left alone, every thread would start its own team of MKL/OpenMP threads); this
    process's setting is restored afterwards.
    """
    errors: list[BaseException] = []
    before = torch.get_num_threads()

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                torch.set_num_threads(1)
                fn()
            except BaseException as exc:
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(fn), name=f"dp-device-{i}")
               for i, fn in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    torch.set_num_threads(before)
    if errors:
        raise errors[0]


def _grad_bytes(params: Sequence[torch.Tensor]) -> int:
    """Bytes of the gradients `params` hold."""
    return storage_bytes(p.grad for p in params if p.grad is not None)


@dataclass
class _Step:
    """What the phases of one re-enacted step share."""

    tr: Trace
    clock: Clock
    params: Sequence[torch.Tensor]  # device 0's parameters
    pbytes: int  # bytes of one copy of the parameters
    replica_params: list[list[torch.Tensor]] = field(default_factory=list)  # per used device
    not_activations: list[torch.Tensor] = field(default_factory=list)  # params, inputs


def _start(module: nn.Module, x: torch.Tensor, n_devices: int,
           optimizer: torch.optim.Optimizer | None) -> _Step:
    """A new step's trace, with device 0 holding the module, the batch and the optimizer."""
    batch = check_batch(x, n_devices)
    clock = Clock()
    tr = Trace("re-enacted", meta={"strategy": "dp", "n_devices": n_devices, "batch_size": batch,
                                 "where": "CPU, virtual devices"})
    params = list(module.parameters())
    step = _Step(tr, clock, params, storage_bytes(params))
    for d in range(n_devices):
        for cat in ("parameters", "input", "activations", "outputs", "gradients"):
            tr.sample(d, 0.0, cat, 0)
    tr.sample(0, 0.0, "parameters", step.pbytes)
    tr.sample(0, 0.0, "optimizer", storage_bytes(optimizer_tensors(optimizer)) if optimizer
              else 0)
    tr.sample(0, 0.0, "input", tensor_bytes(x))
    tr.sample(0, 0.0, "gradients", _grad_bytes(params))
    tr.sample(0, 0.0, "gathered", 0)
    tr.sample(0, 0.0, "loss", 0)
    return step


def _scatter(step: _Step, x: torch.Tensor, n_devices: int) -> list[torch.Tensor]:
    """1. scatter: torch.chunk, then a copy for every device but 0 (chunk 0 is a view)."""
    inputs: list[torch.Tensor] = []
    for d, chunk in enumerate(x.chunk(n_devices)):
        t0 = step.clock.now()
        inputs.append(chunk if d == 0 else chunk.clone())
        nbytes = tensor_bytes(chunk)
        step.tr.add(Event(d, "comm", "scatter", t0, step.clock.now(), 0 if d == 0 else nbytes,
                          f"{chunk.shape[0]} samples"))
        if d:
            step.tr.sample(d, step.clock.now(), "input", nbytes)
    return inputs


def _replicate(step: _Step, module: nn.Module, used: int) -> list[nn.Module]:
    """2. replicate: parameter copies (device 0's share storage) and module copies."""
    replicas: list[nn.Module] = []
    for d in range(used):
        t0 = step.clock.now()
        copies = [(p.detach() if d == 0 else p.detach().clone()).requires_grad_(p.requires_grad)
                  for p in step.params]
        replicas.append(replicate_module(module, copies))
        step.replica_params.append(copies)
        step.tr.add(Event(d, "comm", "replicate", t0, step.clock.now(),
                          0 if d == 0 else step.pbytes, "parameter copies"))
        if d:
            step.tr.sample(d, step.clock.now(), "parameters", step.pbytes)
    return replicas


def _parallel_apply(step: _Step, replicas: list[nn.Module], inputs: list[torch.Tensor]
                    ) -> list[torch.Tensor]:
    """3. parallel_apply: one thread per device runs its replica on its chunk."""
    used = len(replicas)
    outputs: list[torch.Tensor | None] = [None] * used
    launched = [0.0] * used

    def forward(d: int) -> Callable[[], None]:
        def run() -> None:
            t0 = step.clock.now()
            step.tr.add(Event(d, "python", "python", launched[d], t0, label="thread start"))
            with saved_tensors(step.not_activations, size="view") as saved:
                out = replicas[d](inputs[d])
            t1 = step.clock.now()
            step.tr.add(Event(d, "compute", "forward", t0, t1, label=f"replica {d}"))
            step.tr.sample(d, t1, "activations", saved.nbytes)
            step.tr.sample(d, t1, "outputs", tensor_bytes(out))
            outputs[d] = out
        return run

    fns = [forward(d) for d in range(used)]
    launched = [step.clock.now()] * used
    run_threads(fns)
    return [o for o in outputs if o is not None]


def _gather(step: _Step, outs: list[torch.Tensor], sizes: list[int]
            ) -> tuple[torch.Tensor, float]:
    """4. gather: the outputs concatenated on device 0; returns them and the phase's end."""
    t0 = step.clock.now()
    gathered = torch.cat([o.detach() for o in outs]).requires_grad_()
    t1 = step.clock.now()
    for d in range(len(sizes)):
        nbytes = tensor_bytes(outs[d])
        step.tr.add(Event(d, "comm", "gather", t0, t1, nbytes if d else 0,
                          f"{sizes[d]} outputs"))
        step.tr.sample(d, t1, "outputs", 0)
    step.tr.sample(0, t1, "gathered", tensor_bytes(gathered))
    return gathered, t1


def _loss(step: _Step, gathered: torch.Tensor, y: torch.Tensor, loss_fn: LossFn,
          t1: float) -> tuple[torch.Tensor, float]:
    """5. loss on device 0 over the whole batch, from `t1`; returns it and the phase's end."""
    with saved_tensors([*step.not_activations, gathered], size="view") as saved:
        loss = loss_fn(gathered, y)
    t2 = step.clock.now()
    step.tr.add(Event(0, "compute", "loss", t1, t2, label="loss on device 0"))
    step.tr.sample(0, t2, "loss", saved.nbytes)
    return loss, t2


def _loss_backward(step: _Step, loss: torch.Tensor, gathered: torch.Tensor, sizes: list[int],
                   t2: float) -> list[torch.Tensor]:
    """6a. backward of the loss on device 0, from `t2`; the output gradient split back."""
    loss.backward()
    grad = gathered.grad
    assert grad is not None
    t3 = step.clock.now()
    step.tr.add(Event(0, "compute", "backward", t2, t3, label="loss backward"))
    step.tr.sample(0, t3, "loss", 0)
    step.tr.sample(0, t3, "gathered", tensor_bytes(gathered) + tensor_bytes(grad))
    grads = [g if d == 0 else g.clone() for d, g in enumerate(grad.split(sizes))]
    t4 = step.clock.now()
    for d in range(1, len(sizes)):
        step.tr.add(Event(d, "comm", "grad_scatter", t3, t4, tensor_bytes(grads[d]),
                          "output gradients"))
        step.tr.sample(d, t4, "outputs", tensor_bytes(grads[d]))
    return grads


def _replica_backward(step: _Step, outs: list[torch.Tensor], grads: list[torch.Tensor]
                      ) -> None:
    """6b. backward through every replica, one thread per device (as autograd per GPU)."""

    def backward(d: int) -> Callable[[], None]:
        def run() -> None:
            t0 = step.clock.now()
            torch.autograd.backward(outs[d], grads[d])
            t1 = step.clock.now()
            step.tr.add(Event(d, "compute", "backward", t0, t1, label=f"replica {d}"))
            for cat in ("activations", "outputs"):
                step.tr.sample(d, t1, cat, 0)
            if d:
                step.tr.sample(d, t1, "input", 0)
            step.tr.sample(d, t1, "gradients", _grad_bytes(step.replica_params[d]))
        return run

    run_threads([backward(d) for d in range(len(outs))])


def _reduce(step: _Step) -> None:
    """7. reduce: the replicas' gradients summed into device 0's .grad."""
    t0 = step.clock.now()
    for i, p in enumerate(step.params):
        parts = [g for g in (rp[i].grad for rp in step.replica_params) if g is not None]
        if not parts:
            continue
        total = parts[0].clone()
        for g in parts[1:]:
            total += g
        p.grad = total if p.grad is None else p.grad + total
    t1 = step.clock.now()
    for d in range(len(step.replica_params)):
        step.tr.add(Event(d, "comm", "reduce", t0, t1, step.pbytes if d else 0,
                          "gradients onto device 0"))
        if d:
            step.tr.sample(d, t1, "gradients", 0)
            step.tr.sample(d, t1, "parameters", 0)
    step.tr.sample(0, t1, "gradients", _grad_bytes(step.params))


def _optimizer(step: _Step, optimizer: torch.optim.Optimizer | None) -> None:
    """8. the optimizer step on device 0, if there is an optimizer."""
    if optimizer is None:
        return
    t0 = step.clock.now()
    optimizer.step()
    t1 = step.clock.now()
    step.tr.add(Event(0, "compute", "optimizer", t0, t1, label=type(optimizer).__name__))
    step.tr.sample(0, t1, "optimizer", storage_bytes(optimizer_tensors(optimizer)))


def reenact_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, n_devices: int, *,
                 optimizer: torch.optim.Optimizer | None = None,
                 loss_fn: LossFn = nn.functional.cross_entropy) -> DPStepResult:
    """One DataParallel training step over `n_devices` virtual CPU devices, re-enacted.

    Device 0 holds `module`, `x`, `y` and `optimizer`. Gradients are accumulated into the
    module's .grad (like DataParallel); `optimizer.step()` runs if an optimizer is given.
    """
    step = _start(module, x, n_devices, optimizer)
    inputs = _scatter(step, x, n_devices)
    sizes = [int(c.shape[0]) for c in inputs]
    used = len(sizes)
    if used == 1:  # DataParallel calls the module itself: no replicas, threads or gather
        return _single(step, module, inputs[0], y, optimizer, loss_fn, sizes)
    replicas = _replicate(step, module, used)
    step.not_activations = [*(p for ps in step.replica_params for p in ps), x, *inputs]
    outs = _parallel_apply(step, replicas, inputs)
    gathered, t1 = _gather(step, outs, sizes)
    loss, t2 = _loss(step, gathered, y, loss_fn, t1)
    grads = _loss_backward(step, loss, gathered, sizes, t2)
    _replica_backward(step, outs, grads)
    step.tr.sample(0, step.clock.now(), "gathered", tensor_bytes(gathered))
    _reduce(step)
    _optimizer(step, optimizer)
    return step_result(module, step.tr, sizes, loss, f"re-enacted on the CPU: {used} virtual "
                       f"devices, {used} Python threads")


def _single(step: _Step, module: nn.Module, x: torch.Tensor, y: torch.Tensor,
            optimizer: torch.optim.Optimizer | None, loss_fn: LossFn,
            sizes: list[int]) -> DPStepResult:
    """DataParallel with one device in use: the module is called directly."""
    tr, clock = step.tr, step.clock
    t0 = clock.now()
    with saved_tensors([*step.params, x], size="view") as saved:
        out = module(x)
        t1 = clock.now()
        loss = loss_fn(out, y)
    t2 = clock.now()
    tr.add(Event(0, "compute", "forward", t0, t1, label="module"))
    tr.add(Event(0, "compute", "loss", t1, t2, label="loss"))
    tr.sample(0, t2, "activations", saved.nbytes)
    tr.sample(0, t2, "outputs", tensor_bytes(out))
    loss.backward()
    t3 = clock.now()
    tr.add(Event(0, "compute", "backward", t2, t3, label="module"))
    for cat in ("activations", "outputs"):
        tr.sample(0, t3, cat, 0)
    tr.sample(0, t3, "gradients", _grad_bytes(step.params))
    _optimizer(step, optimizer)
    return step_result(module, tr, sizes, loss, "re-enacted on the CPU: one device in use, "
                       "the module is called directly (as DataParallel does)")


def single_device_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                       optimizer: torch.optim.Optimizer | None = None,
                       loss_fn: LossFn = nn.functional.cross_entropy) -> dict[str, torch.Tensor]:
    """The reference: one ordinary step on the whole batch; returns the gradients."""
    loss_fn(module(x), y).backward()
    if optimizer is not None:
        optimizer.step()
    return {n: p.grad.detach().clone() for n, p in module.named_parameters()
            if p.grad is not None}
