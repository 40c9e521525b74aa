"""The hooks that time one real DDP step: gradient-ready times and each bucket's all-reduce.

`DDPRecorder` attaches to a DistributedDataParallel module:

* a communication hook that stamps the time, then performs the all-reduce exactly as
  DDP's default does (divide by the world size, all_reduce asynchronously), and a callback
  on its future that stamps the time it completes;
* a post-accumulate-grad hook that stamps when a gradient is ready, which splits backward
  into per-layer segments: on every parameter in the first steps, then only on each
  layer's last one (the segments end where a layer's last gradient was ready).

The hooks only write a timestamp into a slot made beforehand (no lists grown, no events
built, no dictionary looked up); which parameters each bucket holds is noted during the
first steps only (DDP rebuilds its buckets in step 2), and events are built after the step.

What the recorder adds to a step: beyond its timestamps, the price DDP charges any Python
comm hook, a Python call and a future callback per bucket (the callback runs on gloo's
worker thread, which pybind11 gives a fresh Python thread state each time), and the division
by the world size as a pass of its own over the bucket (without a hook DDP fuses it into the
copy into the bucket). benchmarks/ddp.py measures the whole recorder on 2 ranks, beside
torch's own `allreduce_hook`, the floor for any Python comm hook. gloo has no cheaper
per-operation completion time in torch 2.13 (no completion hook, no `Work._get_duration`:
tests/runtime/test_gloo_timing.py); NCCL has both (the duration with
TORCH_NCCL_ENABLE_TIMING set, as torch's docstring of `Work._get_duration` says).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dpsim.sim import Event

LEARN_STEPS = 3  # DDP rebuilds its buckets in step 2; step 3 is the first with the final ones


@dataclass(frozen=True)
class ObservedBucket:
    """A bucket as DDP really built it."""

    index: int
    params: tuple[str, ...]  # parameter names, in the bucket's order
    nbytes: int


class DDPRecorder:
    """Attach to a DDP module before its first step; call begin()/end() around each step.

    The hooks only write timestamps (time.perf_counter seconds) into slots made for them
    beforehand; end() turns the step's timestamps into events after the step's timing has
    ended (`step_events`).
    """

    def __init__(self, ddp: Any, register: bool = True) -> None:
        """Make the hooks; `register=False` leaves `ddp.register_comm_hook(None,
        recorder.hook)` to the caller (chapter 5 attaches it in view)."""
        self.ddp = ddp
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.names = {id(p): n for n, p in ddp.module.named_parameters()}
        params = [(n, p) for n, p in ddp.module.named_parameters() if p.requires_grad]
        self.param_names = [n for n, _ in params]
        self.layer_of = {n: n.rsplit(".", 1)[0] if "." in n else n for n in self.names.values()}
        self.buckets: dict[int, ObservedBucket] = {}
        self.steps: list[list[Event]] = []
        self._ready = [0.0] * len(params)  # per parameter: when its gradient was ready
        self._starts: list[float] = []  # per bucket index: when its all-reduce started
        self._ends: list[float] = []  # per bucket index: when its all-reduce completed
        self._dones: list[Callable[[Any], torch.Tensor]] = []  # per bucket: stamps its end
        self._learning = [True]  # noting which parameters each bucket holds
        self._t0 = 0.0
        self._step = 0
        self.hook = self._make_hook()  # the comm hook: stamps a bucket, then all-reduces it
        if register:
            ddp.register_comm_hook(None, self.hook)
        self._handles = [p.register_post_accumulate_grad_hook(self._ready_hook(i))
                         for i, (_, p) in enumerate(params)]

    def _ready_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        ready, clock = self._ready, time.perf_counter

        def hook(_: torch.Tensor) -> None:
            ready[i] = clock()
        return hook

    def _make_hook(self) -> Callable[..., torch.futures.Future[torch.Tensor]]:
        """The comm hook: locals only, one branch taken in the first steps only."""
        clock, starts, dones, learning = time.perf_counter, self._starts, self._dones, \
            self._learning
        world_size, note = self.world_size, self._note
        group: Any = getattr(self.ddp, "process_group", None) or dist.group.WORLD
        allreduce, options = group.allreduce, dist.AllreduceOptions()  # a sum, as DDP's

        def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            start = clock()
            index, buffer = bucket.index(), bucket.buffer()
            if learning[0] or index >= len(dones):
                note(index, bucket, buffer)
            starts[index] = start
            buffer.div_(world_size)  # what DDP's own all-reduce does, on its process group
            return allreduce([buffer], options).get_future().then(dones[index])

        # DDP checks a hook's annotations as objects; `from __future__ import annotations`
        # made them strings, so put the real ones back.
        hook.__annotations__.update(bucket=dist.GradBucket, state=object,
                                    **{"return": torch.futures.Future[torch.Tensor]})
        return hook

    def _note(self, index: int, bucket: dist.GradBucket, buffer: torch.Tensor) -> None:
        """Note a bucket's parameters and bytes, and make its slots (first steps only)."""
        self.buckets[index] = ObservedBucket(
            index, tuple(self.names[id(p)] for p in bucket.parameters()),
            buffer.numel() * buffer.element_size())
        while len(self._dones) <= index:
            self._starts.append(0.0)
            self._ends.append(0.0)
            self._dones.append(self._done(len(self._dones)))

    def _done(self, index: int) -> Callable[[Any], torch.Tensor]:
        """The callback that stamps bucket `index`'s end (made once per bucket)."""
        ends, clock = self._ends, time.perf_counter

        def done(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            ends[index] = clock()
            return f.value()[0]
        return done

    def begin(self) -> None:
        """Mark the start of a step (call before forward)."""
        self._step += 1
        self._learning[0] = self._step <= LEARN_STEPS
        if self._learning[0]:
            self.buckets.clear()  # the step's own buckets, noted again by the hook
        for i in range(len(self._starts)):
            self._starts[i] = self._ends[i] = 0.0
        self._t0 = time.perf_counter()

    def end(self, forward_end: float, backward_end: float, step_end: float) -> None:
        """Turn the step's timestamps (time.perf_counter) into events of this rank."""
        ready = {n: at for n, at in zip(self.param_names, self._ready, strict=True)
                 if at >= self._t0}
        if self._step == LEARN_STEPS:
            self._keep_last_of_each_layer(ready)
        comm = {i: (s, e) for i, (s, e) in enumerate(zip(self._starts, self._ends,
                                                          strict=True)) if s >= self._t0}
        self.steps.append(step_events(
            self.rank, self._t0, (forward_end, backward_end, step_end), ready, comm,
            {i: b.nbytes for i, b in self.buckets.items()}, self.layer_of))


    def _keep_last_of_each_layer(self, ready: dict[str, float]) -> None:
        """Keep the gradient-ready hook of each layer's last parameter only.

        The backward segments need only when each layer's last gradient was ready
        (`step_events`); the order within a layer is the graph's, the same every step.
        """
        last: dict[str, str] = {}
        for name, at in ready.items():
            layer = self.layer_of[name]
            if layer not in last or at >= ready[last[layer]]:
                last[layer] = name
        keep = set(last.values())
        for name, handle in zip(self.param_names, self._handles, strict=True):
            if name in ready and name not in keep:
                handle.remove()


def step_events(rank: int, t0: float, phase_ends: tuple[float, float, float],
                ready: dict[str, float], comm: dict[int, tuple[float, float]],
                bucket_nbytes: dict[int, int], layer_of: dict[str, str]) -> list[Event]:
    """One rank's step as events, from its timestamps (seconds of one clock).

    `t0`: the step's start; `phase_ends`: when forward, backward and the optimizer ended;
    `ready`: parameter name -> when its gradient was ready; `comm`: bucket index ->
    (all-reduce start, end); `bucket_nbytes`: bucket index -> bytes; `layer_of`: parameter
    name -> layer name. Backward is split at the times each layer's last gradient was
    ready, in that order; times in the events are seconds from `t0`.
    """
    forward_end, backward_end, step_end = phase_ends
    events = [Event(rank, "compute", "forward", 0.0, forward_end - t0, label="forward")]
    layers: dict[str, float] = {}
    for name, at in ready.items():
        layer = layer_of[name]
        layers[layer] = max(layers.get(layer, at), at)
    cursor = forward_end
    for layer, at in sorted(layers.items(), key=lambda kv: kv[1]):
        events.append(Event(rank, "compute", "backward", cursor - t0, at - t0, label=layer))
        cursor = at
    events.append(Event(rank, "compute", "optimizer", backward_end - t0, step_end - t0,
                        label="optimizer"))
    for index, (start, end) in sorted(comm.items()):
        events.append(Event(rank, "comm", "all_reduce", start - t0, max(end, start) - t0,
                            bucket_nbytes[index], f"bucket {index}"))
    return events
