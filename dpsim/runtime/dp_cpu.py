"""DataParallel run for real: re-enacted on the CPU, or the real `nn.DataParallel` on GPUs.

On a machine without CUDA, `nn.DataParallel` has no device_ids and simply calls the
module, and torch's scatter / replicate / parallel_apply / gather refuse CPU tensors.
`reenact_step` runs the same algorithm over N *virtual devices* with real tensors and
autograd, one phase at a time, and records every phase in a measured Trace:

scatter (`x.chunk(N)`, copies for devices 1..N-1) -> replicate (parameter copies and
shallow module copies, as torch.nn.parallel.replicate does) -> parallel_apply (one
Python thread per device) -> gather (torch.cat on device 0) -> loss on device 0 ->
backward (the output gradient split back, one thread per device, as autograd runs one
thread per GPU) -> reduce (replica gradients summed into device 0's .grad) -> optimizer.

Memory per virtual device is the bytes of the real tensors that device would hold
(parameters, input chunk, what autograd saved, outputs, gradients). `cuda_step` times the
real `nn.DataParallel` per phase and per device and reads torch.cuda memory per device.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dpsim.runtime.measure import optimizer_tensors, storage_bytes
from dpsim.trace import Event, Trace
from dpsim.validation import require_int

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class DPStepResult:
    """One measured DataParallel step."""

    trace: Trace  # source "measured": phases per device, memory per device
    chunk_sizes: list[int]  # samples each used device got
    loss: float
    how: str  # where and how it ran
    gradients: dict[str, torch.Tensor] = field(default_factory=dict)  # device 0's .grad (CPU)


def _check_batch(x: torch.Tensor, n_devices: int) -> int:
    require_int("n_devices", n_devices, 1, 64)
    if x.dim() == 0 or x.shape[0] < 1:
        raise ValueError(f"batch_size={0 if x.dim() == 0 else x.shape[0]} is out of range; "
                         "allowed >= 1 (give a batch with at least one sample)")
    return int(x.shape[0])


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


class _Clock:
    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.t0


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _saved_bytes(exclude: set[int]) -> tuple[Any, dict[int, int]]:
    """A saved-tensors hook context: bytes saved per storage, storages in `exclude` skipped."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in exclude and t.numel() > 0:
            seen[ptr] = max(seen.get(ptr, 0), _nbytes(t))
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), seen


def _run_threads(fns: list[Callable[[], None]]) -> None:
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
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
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


def reenact_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, n_devices: int, *,
                 optimizer: torch.optim.Optimizer | None = None,
                 loss_fn: LossFn = nn.functional.cross_entropy) -> DPStepResult:
    """One DataParallel training step over `n_devices` virtual CPU devices, measured.

    Device 0 holds `module`, `x`, `y` and `optimizer`. Gradients are accumulated into the
    module's .grad (like DataParallel); `optimizer.step()` runs if an optimizer is given.
    """
    batch = _check_batch(x, n_devices)
    clock = _Clock()
    tr = Trace("measured", meta={"strategy": "dp", "n_devices": n_devices, "batch_size": batch,
                                 "where": "CPU, virtual devices"})
    ev = tr.add
    params = list(module.parameters())
    pbytes = storage_bytes(params)
    for d in range(n_devices):
        for cat in ("parameters", "input", "activations", "outputs", "gradients"):
            tr.sample(d, 0.0, cat, 0)
    tr.sample(0, 0.0, "parameters", pbytes)
    tr.sample(0, 0.0, "optimizer", storage_bytes(optimizer_tensors(optimizer)) if optimizer
              else 0)
    tr.sample(0, 0.0, "input", _nbytes(x))
    tr.sample(0, 0.0, "gradients", storage_bytes(p.grad for p in params if p.grad is not None))
    tr.sample(0, 0.0, "gathered", 0)
    tr.sample(0, 0.0, "loss", 0)

    # 1. scatter: torch.chunk, then a copy for every device but 0 (chunk 0 is a view)
    inputs: list[torch.Tensor] = []
    for d, chunk in enumerate(x.chunk(n_devices)):
        t0 = clock.now()
        inputs.append(chunk if d == 0 else chunk.clone())
        nbytes = _nbytes(chunk)
        ev(Event(d, "comm", "scatter", t0, clock.now(), 0 if d == 0 else nbytes,
                 f"{chunk.shape[0]} samples"))
        if d:
            tr.sample(d, clock.now(), "input", nbytes)
    sizes = [int(c.shape[0]) for c in inputs]
    used = len(sizes)
    if used == 1:  # DataParallel calls the module itself: no replicas, threads or gather
        return _single(module, inputs[0], y, optimizer, loss_fn, tr, clock, sizes)

    # 2. replicate: parameter copies (device 0's share storage) and module copies
    replica_params: list[list[torch.Tensor]] = []
    replicas: list[nn.Module] = []
    for d in range(used):
        t0 = clock.now()
        copies = [(p.detach() if d == 0 else p.detach().clone()).requires_grad_(p.requires_grad)
                  for p in params]
        replicas.append(replicate_module(module, copies))
        replica_params.append(copies)
        ev(Event(d, "comm", "replicate", t0, clock.now(), 0 if d == 0 else pbytes,
                 "parameter copies"))
        if d:
            tr.sample(d, clock.now(), "parameters", pbytes)
    exclude = {p.untyped_storage().data_ptr() for ps in replica_params for p in ps}
    exclude |= {t.untyped_storage().data_ptr() for t in (x, *inputs)}

    # 3. parallel_apply: one thread per device
    outputs: list[torch.Tensor | None] = [None] * used
    launched = [0.0] * used

    def forward(d: int) -> Callable[[], None]:
        def run() -> None:
            t0 = clock.now()
            ev(Event(d, "python", "python", launched[d], t0, label="thread start"))
            hooks, seen = _saved_bytes(exclude)
            with hooks:
                out = replicas[d](inputs[d])
            t1 = clock.now()
            ev(Event(d, "compute", "forward", t0, t1, label=f"replica {d}"))
            tr.sample(d, t1, "activations", sum(seen.values()))
            tr.sample(d, t1, "outputs", _nbytes(out))
            outputs[d] = out
        return run

    fns = [forward(d) for d in range(used)]
    launched = [clock.now()] * used
    _run_threads(fns)
    outs = [o for o in outputs if o is not None]

    # 4. gather on device 0
    t0 = clock.now()
    gathered = torch.cat([o.detach() for o in outs]).requires_grad_()
    t1 = clock.now()
    for d in range(used):
        nbytes = _nbytes(outs[d])
        ev(Event(d, "comm", "gather", t0, t1, nbytes if d else 0, f"{sizes[d]} outputs"))
        tr.sample(d, t1, "outputs", 0)
    tr.sample(0, t1, "gathered", _nbytes(gathered))

    # 5. loss on device 0
    hooks, seen = _saved_bytes(exclude | {gathered.untyped_storage().data_ptr()})
    with hooks:
        loss = loss_fn(gathered, y)
    t2 = clock.now()
    ev(Event(0, "compute", "loss", t1, t2, label="loss on device 0"))
    tr.sample(0, t2, "loss", sum(seen.values()))

    # 6. backward: loss backward on device 0, gradient split back, one thread per device
    loss.backward()
    grad = gathered.grad
    assert grad is not None
    t3 = clock.now()
    ev(Event(0, "compute", "backward", t2, t3, label="loss backward"))
    tr.sample(0, t3, "loss", 0)
    tr.sample(0, t3, "gathered", _nbytes(gathered) + _nbytes(grad))
    grads = [g if d == 0 else g.clone() for d, g in enumerate(grad.split(sizes))]
    t4 = clock.now()
    for d in range(1, used):
        ev(Event(d, "comm", "grad_scatter", t3, t4, _nbytes(grads[d]), "output gradients"))
        tr.sample(d, t4, "outputs", _nbytes(grads[d]))

    def backward(d: int) -> Callable[[], None]:
        def run() -> None:
            t0 = clock.now()
            torch.autograd.backward(outs[d], grads[d])
            t1 = clock.now()
            ev(Event(d, "compute", "backward", t0, t1, label=f"replica {d}"))
            for cat in ("activations", "outputs"):
                tr.sample(d, t1, cat, 0)
            if d:
                tr.sample(d, t1, "input", 0)
            tr.sample(d, t1, "gradients",
                      storage_bytes(p.grad for p in replica_params[d] if p.grad is not None))
        return run

    _run_threads([backward(d) for d in range(used)])
    tr.sample(0, clock.now(), "gathered", _nbytes(gathered))

    # 7. reduce: replica gradients summed into device 0's .grad
    t0 = clock.now()
    for i, p in enumerate(params):
        parts = [g for g in (rp[i].grad for rp in replica_params) if g is not None]
        if not parts:
            continue
        total = parts[0].clone()
        for g in parts[1:]:
            total += g
        p.grad = total if p.grad is None else p.grad + total
    t1 = clock.now()
    for d in range(used):
        ev(Event(d, "comm", "reduce", t0, t1, pbytes if d else 0, "gradients onto device 0"))
        if d:
            tr.sample(d, t1, "gradients", 0)
            tr.sample(d, t1, "parameters", 0)
    tr.sample(0, t1, "gradients", storage_bytes(p.grad for p in params if p.grad is not None))
    _optimizer(optimizer, tr, clock)
    return _result(module, tr, sizes, loss, f"re-enacted on the CPU: {used} virtual devices, "
                   f"{used} Python threads")


def _single(module: nn.Module, x: torch.Tensor, y: torch.Tensor,
            optimizer: torch.optim.Optimizer | None, loss_fn: LossFn, tr: Trace,
            clock: _Clock, sizes: list[int]) -> DPStepResult:
    """DataParallel with one device in use: the module is called directly."""
    params = list(module.parameters())
    exclude = {p.untyped_storage().data_ptr() for p in params} | {x.untyped_storage().data_ptr()}
    t0 = clock.now()
    hooks, seen = _saved_bytes(exclude)
    with hooks:
        out = module(x)
        t1 = clock.now()
        loss = loss_fn(out, y)
    t2 = clock.now()
    tr.add(Event(0, "compute", "forward", t0, t1, label="module"))
    tr.add(Event(0, "compute", "loss", t1, t2, label="loss"))
    tr.sample(0, t2, "activations", sum(seen.values()))
    tr.sample(0, t2, "outputs", _nbytes(out))
    loss.backward()
    t3 = clock.now()
    tr.add(Event(0, "compute", "backward", t2, t3, label="module"))
    for cat in ("activations", "outputs"):
        tr.sample(0, t3, cat, 0)
    tr.sample(0, t3, "gradients", storage_bytes(p.grad for p in params if p.grad is not None))
    _optimizer(optimizer, tr, clock)
    return _result(module, tr, sizes, loss, "re-enacted on the CPU: one device in use, the "
                   "module is called directly (as DataParallel does)")


def _optimizer(optimizer: torch.optim.Optimizer | None, tr: Trace, clock: _Clock) -> None:
    if optimizer is None:
        return
    t0 = clock.now()
    optimizer.step()
    t1 = clock.now()
    tr.add(Event(0, "compute", "optimizer", t0, t1, label=type(optimizer).__name__))
    tr.sample(0, t1, "optimizer", storage_bytes(optimizer_tensors(optimizer)))


def _result(module: nn.Module, tr: Trace, sizes: list[int], loss: torch.Tensor,
            how: str) -> DPStepResult:
    tr.meta.update({"chunk_sizes": sizes, "n_devices_used": len(sizes), "how": how,
                    "step_time_s": tr.end_s})
    tr.meta["peak_bytes"] = [tr.peak_memory(d) for d in range(tr.meta["n_devices"])]
    grads = {n: p.grad.detach().cpu().clone() for n, p in module.named_parameters()
             if p.grad is not None}
    return DPStepResult(tr, sizes, float(loss.detach()), how, grads)


def single_device_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                       optimizer: torch.optim.Optimizer | None = None,
                       loss_fn: LossFn = nn.functional.cross_entropy) -> dict[str, torch.Tensor]:
    """The reference: one ordinary step on the whole batch; returns the gradients."""
    loss_fn(module(x), y).backward()
    if optimizer is not None:
        optimizer.step()
    return {n: p.grad.detach().clone() for n, p in module.named_parameters()
            if p.grad is not None}


# --- the real nn.DataParallel on CUDA GPUs ---------------------------------------------------


def cuda_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor,
              device_ids: list[int] | None = None, *,
              optimizer: torch.optim.Optimizer | None = None,
              loss_fn: LossFn = nn.functional.cross_entropy) -> DPStepResult:
    """One step of the real `nn.DataParallel` on CUDA, timed phase by phase and per device.

    The phases call DataParallel's own scatter / replicate / parallel_apply / gather, with
    all devices synchronised between phases; per-device forward times come from CUDA events
    recorded by forward hooks in each replica's thread; memory is torch.cuda.memory_allocated
    per device after each phase (category "allocated"). `module` must be on device_ids[0].
    """
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_step needs a CUDA GPU; use reenact_step on the CPU")
    ids = list(device_ids) if device_ids else list(range(torch.cuda.device_count()))
    _check_batch(x, len(ids))
    dp = nn.DataParallel(module, device_ids=ids)
    marks: dict[int, list[Any]] = {}

    def mark(*_: Any) -> None:
        e = torch.cuda.Event(enable_timing=True)
        e.record(torch.cuda.current_stream())
        marks.setdefault(torch.cuda.current_device(), []).append(e)

    handles = [module.register_forward_pre_hook(mark), module.register_forward_hook(mark)]
    timer = _CudaPhases(ids, int(x.shape[0]))
    try:
        inputs, kwargs = dp.scatter((x,), {}, dp.device_ids)
        used = list(range(len(inputs)))
        timer.phase("scatter", used, "DataParallel.scatter",
                    [0] + [_nbytes(i[0]) for i in inputs[1:]])
        if len(ids) == 1:
            out = dp.module(*inputs[0], **kwargs[0])
            timer.phase("forward", used, "module called directly (one device)")
        else:
            replicas = dp.replicate(dp.module, dp.device_ids[:len(inputs)])
            pbytes = sum(_nbytes(p) for p in module.parameters())
            timer.phase("replicate", used, "DataParallel.replicate",
                        [0] + [pbytes] * (len(used) - 1))
            outputs = dp.parallel_apply(replicas, inputs, kwargs)
            timer.phase("forward", [], "")
            _forward_events(timer.trace, ids, used, timer.starts, marks)
            out = dp.gather(outputs, dp.output_device)
            timer.phase("gather", used, "DataParallel.gather",
                        [0] + [_nbytes(o) for o in outputs[1:]])
        loss = loss_fn(out, y.to(out.device))
        timer.phase("loss", [0], "loss on device 0")
        loss.backward()
        timer.phase("backward", used, "backward and reduce onto device 0")
        if optimizer is not None:
            optimizer.step()
            timer.phase("optimizer", [0], type(optimizer).__name__)
    finally:
        for h in handles:
            h.remove()
    tr = timer.trace
    tr.meta["peak_allocated"] = [torch.cuda.max_memory_allocated(d) for d in ids]
    names = ", ".join(f"cuda:{d}" for d in ids)
    return _result(module, tr, [int(i[0].shape[0]) for i in inputs], loss,
                   f"the real nn.DataParallel on {names} ({torch.cuda.get_device_name(ids[0])})")


class _CudaPhases:
    """Synchronise every device, then record a phase's interval and memory per device."""

    COMPUTE = ("forward", "loss", "backward", "optimizer")

    def __init__(self, ids: list[int], batch: int) -> None:
        self.ids = ids
        self.trace = Trace("measured", meta={"strategy": "dp", "n_devices": len(ids),
                                             "batch_size": batch, "where": "CUDA"})
        self.starts: dict[int, Any] = {}
        for d in ids:
            torch.cuda.synchronize(d)
            torch.cuda.reset_peak_memory_stats(d)
            self.starts[d] = torch.cuda.Event(enable_timing=True)
            self.starts[d].record(torch.cuda.current_stream(d))
        self.clock = _Clock()
        self.last = 0.0
        for pos, d in enumerate(ids):
            self.trace.sample(pos, 0.0, "allocated", torch.cuda.memory_allocated(d))

    def phase(self, kind: str, devices: list[int], label: str,
              nbytes: list[int] | None = None) -> None:
        for d in self.ids:
            torch.cuda.synchronize(d)
        t = self.clock.now()
        stream = "compute" if kind in self.COMPUTE else "comm"
        for pos, d in enumerate(self.ids):
            if pos in devices:
                moved = nbytes[pos] if nbytes and pos < len(nbytes) else 0
                self.trace.add(Event(pos, stream, kind, self.last, t, moved, label))
            self.trace.sample(pos, t, "allocated", torch.cuda.memory_allocated(d))
        self.last = t


def _forward_events(tr: Trace, ids: list[int], used: list[int],
                    starts: dict[int, Any], marks: dict[int, list[Any]]) -> None:
    """Per-device forward intervals from the CUDA events the replicas' hooks recorded."""
    for pos in used:
        evs = marks.get(ids[pos], [])
        if len(evs) >= 2:
            a = starts[ids[pos]].elapsed_time(evs[-2]) * 1e-3
            b = starts[ids[pos]].elapsed_time(evs[-1]) * 1e-3
            tr.add(Event(pos, "compute", "forward", a, max(a, b),
                         label=f"replica on cuda:{ids[pos]}"))


def run_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, n_devices: int, *,
             optimizer: torch.optim.Optimizer | None = None, mode: str = "auto",
             warmup: int = 1, loss_fn: LossFn = nn.functional.cross_entropy) -> DPStepResult:
    """`warmup` + 1 training steps (zero_grad first); the result of the last one.

    mode "auto": the real nn.DataParallel when this machine has >= max(n_devices, 2) GPUs,
    else the CPU re-enactment; "cuda" forces the real one (with 1 GPU: device_ids=[0]);
    "cpu" forces the re-enactment. The module and batch move to the device that runs them.
    """
    require_int("n_devices", n_devices, 1, 64)
    require_int("warmup", warmup, 0, 100)
    if mode not in ("auto", "cpu", "cuda"):
        raise ValueError(f"mode={mode!r} is not known; allowed: 'auto', 'cpu', 'cuda'")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    real = mode == "cuda" or (mode == "auto" and gpus >= max(n_devices, 2))
    if real and gpus < 1:
        raise ValueError("mode='cuda' needs a CUDA GPU; this machine has none (use 'cpu')")
    ids = list(range(min(n_devices, gpus))) if real else []
    if real:
        module.to(f"cuda:{ids[0]}")
        x, y = x.to(f"cuda:{ids[0]}"), y.to(f"cuda:{ids[0]}")
    result = None
    for _ in range(warmup + 1):
        module.zero_grad(set_to_none=True)
        result = (cuda_step(module, x, y, ids, optimizer=optimizer, loss_fn=loss_fn) if real
                  else reenact_step(module, x, y, n_devices, optimizer=optimizer,
                                    loss_fn=loss_fn))
    assert result is not None
    return result


# --- batch semantics: DataParallel's batch is global, DDP's is per process -----------------


def ddp_batch_worker(rank: int, world_size: int, batch_size: int, n_samples: int,
                     seed: int = 0) -> dict[str, Any]:
    """One DDP rank: a DataLoader(batch_size) over its DistributedSampler share, one step."""
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    from dpsim.runtime.data import classification
    from dpsim.runtime.models import mlp

    dataset = classification(n_samples, 32, 10, seed)
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, num_replicas=world_size,
                                                          rank=rank, shuffle=False)
    x, y = next(iter(DataLoader(dataset, batch_size=batch_size, sampler=sampler)))
    model = DistributedDataParallel(mlp(32, 64, 2, 10, seed))
    nn.functional.cross_entropy(model(x), y).backward()
    return {"rank": rank, "samples": int(x.shape[0]), "indices": list(sampler)[:batch_size]}


def compare_batch_semantics(batch_size: int = 8, n_devices: int = 2, n_samples: int = 64,
                            seed: int = 0, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Run DP (re-enacted) and DDP (real gloo processes) with the same batch_size argument.

    Returns one row per strategy: samples each device/rank got, and samples per step.
    """
    require_int("batch_size", batch_size, 1, n_samples // max(n_devices, 1))
    require_int("n_devices", n_devices, 1, 8)
    from torch.utils.data import DataLoader

    from dpsim.runtime.data import classification
    from dpsim.runtime.launch import launch
    from dpsim.runtime.models import mlp

    dataset = classification(n_samples, 32, 10, seed)
    x, y = next(iter(DataLoader(dataset, batch_size=batch_size, shuffle=False)))
    dp = reenact_step(mlp(32, 64, 2, 10, seed), x, y, n_devices)
    bounds = [0]
    for size in dp.chunk_sizes:
        bounds.append(bounds[-1] + size)
    ranks = launch(ddp_batch_worker, n_devices, args=(batch_size, n_samples, seed),
                   backend="gloo", timeout_s=timeout_s)
    return [
        {"strategy": "DataParallel (1 process, threads)", "batch_size argument": batch_size,
         "samples per device": dp.chunk_sizes + [0] * (n_devices - len(dp.chunk_sizes)),
         "samples per step": sum(dp.chunk_sizes),
         "first indices per device": [list(range(a, b))[:4] for a, b in zip(bounds, bounds[1:],
                                                                          strict=False)]},
        {"strategy": f"DDP ({n_devices} processes, gloo)", "batch_size argument": batch_size,
         "samples per device": [r["samples"] for r in ranks],
         "samples per step": sum(r["samples"] for r in ranks),
         "first indices per device": [r["indices"][:4] for r in ranks]},
    ]
