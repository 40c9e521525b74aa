"""DataParallel simulated: one process drives N devices, one Python thread per device.

One training step as `torch.nn.DataParallel` runs it (torch/nn/parallel/data_parallel.py):

1. scatter    the batch is cut with `torch.chunk` into chunks of ceil(B/N) samples and
              copied to the devices (B=10, N=4 -> 3,3,3,1; B=2, N=4 -> 1,1 and two idle);
2. replicate  the module is copied from device 0 to every device that got a chunk
              (`broadcast_coalesced`), at every step;
3. parallel_apply  one Python thread per device runs forward on its replica; the Python
              part of every operator holds the GIL, so the threads dispatch one at a time
              while the devices run the kernels asynchronously;
4. gather     the outputs are copied to device 0 and concatenated;
5. loss       on device 0, over the whole batch;
6. backward   the output gradient is scattered back and each device runs its replica's
              backward (autograd runs one C++ thread per device: no GIL);
7. reduce     the replicas' gradients are summed onto device 0's parameters;
8. optimizer  on device 0 only; the next step replicates the new weights again.

With one device in use, torch calls the module directly (no replicate, threads, gather).
Kernel times come from `dpsim.sim.cost.compute` (its per-operator overhead is the host's share);
copies use the cluster's achieved intra-node link (a host batch crosses PCIe); the broadcast
and the reduce (NCCL's when torch has it: `torch.cuda.comm.reduce_add` calls `nccl.reduce`)
cost what `collectives.group_cost` says for the devices in use. Deterministic.
Its config: `dp.config`; the chunks and the bytes each device holds at the loss: `dp.closed_form`.
"""

from __future__ import annotations

from dpsim.sim.collectives.group_cost import achieved_link, group_time_s
from dpsim.sim.collectives.nccl import group_shape
from dpsim.sim.cost.compute import OPS_PER_LAYER, backward_time_s, forward_time_s, optimizer_time_s
from dpsim.sim.cost.gil import Segment, schedule
from dpsim.sim.cost.memory import optimizer_state_bytes
from dpsim.sim.hardware import PCIE4_X16, Cluster, Device
from dpsim.sim.limits import MAX_HOST_US
from dpsim.sim.strategies.dp.closed_form import activation_bytes_per_layer, scatter_sizes
from dpsim.sim.strategies.dp.config import DPConfig
from dpsim.sim.strategies.dp.result import DPState, DPSummary
from dpsim.sim.trace import Event, Trace
from dpsim.sim.workload import DTYPE_BYTES, Layer, Workload

PHASES = ("scatter", "replicate", "forward", "gather", "loss", "backward", "reduce",
          "optimizer")  # event kinds, in step order; "grad_scatter" belongs to backward


def _ops(layer: Layer) -> int:
    return OPS_PER_LAYER if layer.flops or layer.output_bytes else 0


def _loss_s(nbytes: int, device: Device, op_s: float) -> float:
    """Softmax + NLL over the gathered outputs: memory-bound, three operators."""
    return 3 * nbytes / (device.mem_bw_GBps * 1e9) + 3 * op_s


class _Builder:
    """Accumulates events and memory of one simulated step."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.held: dict[tuple[int, str], int] = {}

    def event(self, device: int, stream: str, kind: str, start_s: float, end_s: float,
              nbytes: int = 0, label: str = "") -> float:
        self.trace.add(Event(device, stream, kind, start_s, end_s, int(nbytes), label))
        return end_s

    def mem(self, device: int, time_s: float, category: str, nbytes: float) -> None:
        self.held[(device, category)] = int(nbytes)
        self.trace.sample(device, time_s, category, int(nbytes))

    def add_mem(self, device: int, time_s: float, category: str, delta: float) -> None:
        self.mem(device, time_s, category, self.held.get((device, category), 0) + int(delta))


# long: the eight phases of one DataParallel step, read top to bottom in the order torch runs them
def simulate(workload: Workload, cluster: Cluster, config: DPConfig) -> Trace:
    """Timeline and memory per device of one DataParallel training step.

    Streams per device: "python" (the thread driving it: kind "python" while it holds the
    GIL, "gil_wait" while it waits), "compute" (kernels), "comm" (copies); device 0 also has
    "main", the main thread. Its state (`DPState`, read by `step_result` and `summary`):
    the step time, peak bytes per device, chunk sizes, imbalance (device 0 peak / largest
    other), python_s (seconds some thread held the GIL), phases ({kind: (start_s, end_s)}).
    The config fits the cluster (`check_node`: the face checks it).
    """
    dev, link, dt = cluster.device, achieved_link(cluster.intra_node), config.dtype
    sizes = scatter_sizes(config.batch_size, config.n_devices)
    used = len(sizes)
    scale = DTYPE_BYTES[dt] / DTYPE_BYTES[workload.dtype]
    dev_op_s = dev.op_overhead_us * 1e-6  # compute's per-operator host cost in kernel times
    op_s = dev_op_s if config.python_op_us is None else config.python_op_us * 1e-6
    gil_s, launch_s = op_s * config.op_gil_share, op_s * (1 - config.op_gil_share)
    param_bytes = DTYPE_BYTES[dt] * workload.n_params
    out_b = [workload.output_bytes(b, dt) for b in sizes]
    in_b = [workload.input_bytes * b for b in sizes]
    acts = activation_bytes_per_layer(workload, dt)
    trace = Trace("simulated", meta={"strategy": "dp", "workload": workload.name,
                                     "device": dev.name, "n_devices": config.n_devices,
                                     "batch_size": config.batch_size})
    tb = _Builder(trace)
    for d in range(config.n_devices):
        for cat in ("parameters", "optimizer", "input", "activations", "outputs", "gradients"):
            tb.mem(d, 0.0, cat, 0)
    tb.mem(0, 0.0, "parameters", param_bytes)
    tb.mem(0, 0.0, "optimizer", optimizer_state_bytes(
        workload.n_params, workload.n_param_tensors, config.optimizer, False, dt))
    tb.mem(0, 0.0, "gathered", 0)
    tb.mem(0, 0.0, "loss", 0)
    if config.input_on == "device0":
        tb.mem(0, 0.0, "input", workload.input_bytes * config.batch_size)

    # 1. scatter: the main thread issues one copy per chunk; copies share the sender's link
    host = tb.event(0, "main", "python", 0.0, used * gil_s, label="scatter: issue copies")
    src_link = achieved_link(PCIE4_X16) if config.input_on == "host" else link
    first = 0 if config.input_on == "host" else 1
    ready = [host] * used
    t = host + src_link.latency_us * 1e-6
    for d in range(first, used):
        t0, t = t, t + in_b[d] / (src_link.bandwidth_GBps * 1e9)
        ready[d] = tb.event(d, "comm", "scatter", t0, t, in_b[d], f"{sizes[d]} samples")
        tb.add_mem(d, t, "input", in_b[d])

    # 2. replicate: Python copies of every module, then a broadcast of the parameters
    if used > 1:
        n_modules = len(workload.layers) + 1
        host = tb.event(0, "main", "python", host,
                        host + n_modules * used * config.replicate_us_per_module * 1e-6,
                        label="replicate: copy modules")
        bcast = group_time_s("broadcast", param_bytes, cluster, group_shape(cluster, used))
        for d in range(used):
            end = tb.event(d, "comm", "replicate", host, host + bcast,
                           param_bytes if d else 0, "broadcast_coalesced")
            ready[d] = max(ready[d], end)
            if d:
                tb.mem(d, end, "parameters", param_bytes)

    # 3. parallel_apply: the main thread starts one thread per device, then every thread
    #    dispatches its replica's operators; the Python part of each holds the GIL
    start_s = config.thread_start_us * 1e-6 if used > 1 else 0.0
    sync_cpu = dev.kind == "cpu"
    threads: list[list[Segment]] = []
    kernels: list[list[float]] = []
    for d in range(used):
        segs: list[Segment] = [("free", host + (d + 1) * start_s)]
        ks = []
        for layer in workload.layers:
            n = _ops(layer)
            fwd = forward_time_s(layer, sizes[d], dev, dt, workload.dtype)
            ks.append(max(0.0, fwd - n * dev_op_s))  # the device's share: no host overhead
            segs += [("gil", n * gil_s), ("free", n * launch_s + (ks[-1] if sync_cpu else 0))]
        threads.append(segs)
        kernels.append(ks)
    threads.append([("free", host)] + [("gil", start_s)] * (used if used > 1 else 0))
    try:
        gil = schedule(threads, n_cores=None)
    except ValueError as err:  # the GIL model's cost cap: name what the caller chose
        raise ValueError(f"n_devices={config.n_devices} with {len(workload.layers)} layers "
                         f"is too large a DataParallel step to simulate ({err})") from None
    for ev in gil.events:
        if ev.kind in ("python", "gil_wait"):
            main = ev.device == used
            label = ("parallel_apply: start threads" if main else "forward dispatch") \
                if ev.kind == "python" else "waiting for the GIL"
            tb.event(0 if main else ev.device, "main" if main else "python", ev.kind,
                     ev.start_s, ev.end_s, label=label)
    fwd_end = [0.0] * used
    for d in range(used):
        ends = gil.meta["segment_end_s"][d]
        busy = ready[d]
        act = 0.0
        for li, layer in enumerate(workload.layers):
            launched = ends[2 + 2 * li]
            start = max(launched - kernels[d][li] if sync_cpu else launched, busy)
            busy = tb.event(d, "compute", "forward", start, start + kernels[d][li],
                            label=layer.name)
            act += acts[li] * sizes[d]
            tb.mem(d, busy, "activations", act)
        fwd_end[d] = busy
        tb.mem(d, busy, "outputs", out_b[d])
    host = max(ends[-1] for ends in gil.meta["segment_end_s"])  # threads joined

    # 4. gather: outputs copied into one tensor on device 0
    if used > 1:
        host = tb.event(0, "main", "python", host, host + used * gil_s,
                        label="gather: issue copies")
        t = max(host, fwd_end[0]) + link.latency_us * 1e-6
        for d in range(1, used):
            t0 = max(t, fwd_end[d])
            t = tb.event(d, "comm", "gather", t0, t0 + out_b[d] / (link.bandwidth_GBps * 1e9),
                         out_b[d], f"{sizes[d]} outputs")
            tb.mem(d, t, "outputs", 0)
        gathered = max(t, fwd_end[0])
        tb.event(0, "comm", "gather", min(max(host, fwd_end[0]), gathered), gathered,
                 sum(out_b[1:]), "torch.cat on device 0")
        tb.mem(0, gathered, "outputs", 0)
        tb.mem(0, gathered, "gathered", sum(out_b))
    else:
        gathered = fwd_end[0]

    # 5. loss on device 0 over the whole batch
    all_out = sum(out_b)
    host = tb.event(0, "main", "python", host, host + 3 * gil_s, label="loss")
    start = max(host, gathered)
    loss_end = tb.event(0, "compute", "loss", start, start + _loss_s(all_out, dev, op_s),
                        label="cross entropy")
    tb.mem(0, loss_end, "loss", workload.loss_bytes * config.batch_size * scale)

    # 6. backward: loss backward on device 0, output gradients scattered, replicas' backward
    t = tb.event(0, "compute", "backward", loss_end, loss_end + _loss_s(all_out, dev, op_s),
                 label="loss backward")
    tb.mem(0, t, "loss", 0)
    tb.add_mem(0, t, "gathered" if used > 1 else "outputs", all_out)
    grad_at = [t] * used
    if used > 1:
        t += link.latency_us * 1e-6
        for d in range(1, used):
            t0, t = t, t + out_b[d] / (link.bandwidth_GBps * 1e9)
            grad_at[d] = tb.event(d, "comm", "grad_scatter", t0, t, out_b[d],
                                  "output gradients")
            tb.mem(d, t, "outputs", out_b[d])
        tb.add_mem(0, t, "gathered", -all_out)
    bwd_end = [0.0] * used
    for d in range(used):
        busy = grad_at[d]
        act = sum(acts) * sizes[d]
        for li in reversed(range(len(workload.layers))):
            layer = workload.layers[li]
            kernel = backward_time_s(layer, sizes[d], dev, dt, workload.dtype)
            busy = tb.event(d, "compute", "backward", busy, busy + kernel, label=layer.name)
            act -= acts[li] * sizes[d]
            tb.mem(d, busy, "activations", max(act, 0.0))
        bwd_end[d] = busy
        tb.mem(d, busy, "gradients", param_bytes)
        tb.mem(d, busy, "outputs", 0)
        if d or config.input_on == "host":
            tb.mem(d, busy, "input", 0)

    # 7. reduce: gradients summed onto device 0 (accumulated into .grad)
    t = max(bwd_end)
    if used > 1:
        red = group_time_s("reduce", param_bytes, cluster, group_shape(cluster, used))
        for d in range(used):
            tb.event(d, "comm", "reduce", t, t + red, param_bytes if d else 0,
                     "reduce_add_coalesced")
        t += red
        for d in range(1, used):
            tb.mem(d, t, "gradients", 0)
            tb.mem(d, t, "parameters", 0)

    # 8. optimizer on device 0
    opt = optimizer_time_s(workload.n_params, workload.n_param_tensors, dev, config.optimizer)
    end = tb.event(0, "compute", "optimizer", t, t + opt, label=config.optimizer)
    trace.state = _state(trace, config, sizes, end, gil_s, loss_end)
    return trace


def check_node(hardware: Cluster, config: DPConfig) -> None:
    """One process drives the devices of one node, and the host cost per operator is bounded
    like python_op_us (the device's overhead stands for it when that is None). For the face's
    `simulate(workload, hardware, config)`."""
    d = hardware.devices_per_node
    if config.n_devices > d:
        raise ValueError(f"n_devices={config.n_devices} is out of range for one node of "
                         f"hardware={hardware.name!r}; allowed >= 1 and <= {d}")
    op_us = hardware.device.op_overhead_us
    if config.python_op_us is None and op_us > MAX_HOST_US:
        raise ValueError(f"hardware.device.op_overhead_us={op_us!r} is out of range for "
                         f"DataParallel's host cost (python_op_us=None); allowed >= 0 and <= "
                         f"{MAX_HOST_US}")


def _state(trace: Trace, config: DPConfig, sizes: list[int], end_s: float, gil_s: float,
           loss_time_s: float) -> DPState:
    peaks = [trace.peak_memory(d) for d in range(config.n_devices)]
    others = max(peaks[1:], default=0)
    phases: dict[str, list[float]] = {}
    for ev in trace.events:
        kind = "backward" if ev.kind == "grad_scatter" else ev.kind
        if kind in PHASES:
            span = phases.setdefault(kind, [ev.start_s, ev.end_s])
            span[0], span[1] = min(span[0], ev.start_s), max(span[1], ev.end_s)
    held = sum(e.duration_s for e in trace.events if e.kind == "python")
    return DPState(config.n_devices, end_s, tuple(peaks), DPSummary(
        samples_per_s=config.batch_size / end_s if end_s > 0 else float("inf"),
        chunk_sizes=tuple(sizes),
        n_devices_used=len(sizes),
        imbalance=peaks[0] / others if others else float("inf"),
        python_s=held,
        gil_s_per_op=gil_s,
        phases={k: (v[0], v[1]) for k, v in phases.items()},
        loss_time_s=loss_time_s,
    ))
