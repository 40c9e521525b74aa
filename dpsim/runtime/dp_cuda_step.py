"""The real `nn.DataParallel` on CUDA GPUs, instrumented phase by phase and per device.

`cuda_step` calls DataParallel's own scatter / replicate / parallel_apply / gather, times
each phase per device and reads torch.cuda memory per device (chapter 3's real step, and
the myths lab's peak bytes per GPU).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dpsim.runtime.dp_step import Clock, DPStepResult, LossFn, check_batch, step_result
from dpsim.runtime.measure import tensor_bytes
from dpsim.sim import Event, Trace


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
    check_batch(x, len(ids))
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
                    [0] + [tensor_bytes(i[0]) for i in inputs[1:]])
        if len(ids) == 1:
            out = dp.module(*inputs[0], **kwargs[0])
            timer.phase("forward", used, "module called directly (one device)")
        else:
            replicas = dp.replicate(dp.module, dp.device_ids[:len(inputs)])
            pbytes = sum(tensor_bytes(p) for p in module.parameters())
            timer.phase("replicate", used, "DataParallel.replicate",
                        [0] + [pbytes] * (len(used) - 1))
            outputs = dp.parallel_apply(replicas, inputs, kwargs)
            timer.phase("forward", [], "")
            _forward_events(timer.trace, ids, used, timer.starts, marks)
            out = dp.gather(outputs, dp.output_device)
            timer.phase("gather", used, "DataParallel.gather",
                        [0] + [tensor_bytes(o) for o in outputs[1:]])
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
    how = f"the real nn.DataParallel on {names} ({torch.cuda.get_device_name(ids[0])})"
    return step_result(module, tr, [int(i[0].shape[0]) for i in inputs], loss, how)


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
        self.clock = Clock()
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
