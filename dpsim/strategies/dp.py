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
Kernel times come from `dpsim.compute` (its per-operator overhead is the host's share);
transfers use the cluster's intra-node link (a host batch crosses PCIe). Deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dpsim.collectives.cost import collective_time_s
from dpsim.compute import OPS_PER_LAYER, backward_time_s, forward_time_s, optimizer_time_s
from dpsim.gil import Segment, schedule
from dpsim.hardware import PCIE4_X16, Cluster, Device, Link
from dpsim.memory import OPTIMIZERS, optimizer_state_bytes
from dpsim.trace import Event, Trace
from dpsim.validation import require_choice, require_int, require_range
from dpsim.workload import DTYPE_BYTES, Layer, Workload

INPUT_PLACES = ("device0", "host")
PHASES = ("scatter", "replicate", "forward", "gather", "loss", "backward", "reduce",
          "optimizer")  # event kinds, in step order; "grad_scatter" belongs to backward


@dataclass(frozen=True)
class DPConfig:
    """One `nn.DataParallel` training step."""

    n_devices: int = 4  # len(device_ids): devices one process drives
    batch_size: int = 128  # the global batch, split across devices by scatter
    optimizer: str = "adam"  # one of memory.OPTIMIZERS, stepped on device 0 only
    dtype: str = "fp32"  # parameters, activations and gradients
    input_on: str = "device0"  # the batch before forward: "device0" (x.cuda()) or "host"
    python_op_us: float | None = None  # host cost per operator; None: device.op_overhead_us
    op_gil_share: float = 0.6  # share of that cost in Python (GIL held); rest C++ launch
    replicate_us_per_module: float = 20.0  # Python cost of copying one module for one device
    thread_start_us: float = 60.0  # parallel_apply starts one thread per device per step

    def __post_init__(self) -> None:
        require_int("n_devices", self.n_devices, 1, 1024)
        require_int("batch_size", self.batch_size, 1, 1 << 24)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        require_choice("dtype", self.dtype, DTYPE_BYTES)
        require_choice("input_on", self.input_on, INPUT_PLACES)
        if self.python_op_us is not None:
            require_range("python_op_us", self.python_op_us, 0)
        require_range("op_gil_share", self.op_gil_share, 0, 1)
        require_range("replicate_us_per_module", self.replicate_us_per_module, 0)
        require_range("thread_start_us", self.thread_start_us, 0)


def scatter_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Samples per chunk as `torch.chunk(batch, n_devices)` cuts them (empty chunks dropped).

    Chunks hold ceil(B/N) samples and the last one the rest, so there may be fewer than
    N chunks: B=10, N=4 -> [3, 3, 3, 1]; B=5, N=4 -> [2, 2, 1]; B=2, N=4 -> [1, 1].
    """
    require_int("batch_size", batch_size, 1)
    require_int("n_devices", n_devices, 1)
    size = -(-batch_size // n_devices)
    return [min(size, batch_size - start) for start in range(0, batch_size, size)]


def device_batch_sizes(batch_size: int, n_devices: int) -> list[int]:
    """Samples each of the N devices gets (0 for a device DataParallel leaves idle)."""
    sizes = scatter_sizes(batch_size, n_devices)
    return sizes + [0] * (n_devices - len(sizes))


def with_output_features(workload: Workload, out_features: int) -> Workload:
    """`workload` whose last layer outputs `out_features` values per sample (classifier)."""
    require_int("out_features", out_features, 1)
    if not workload.layers:
        raise ValueError("workload has no layers; give a workload with at least one layer")
    width = DTYPE_BYTES[workload.dtype]
    last = replace(workload.layers[-1], output_bytes=out_features * width)
    return replace(workload, layers=(*workload.layers[:-1], last),
                   loss_bytes=out_features * width + 8,
                   name=f"{workload.name} ({out_features} outputs)")


def _scale(workload: Workload, dtype: str) -> float:
    return DTYPE_BYTES[dtype] / DTYPE_BYTES[workload.dtype]


def activation_bytes_per_layer(workload: Workload, dtype: str) -> list[float]:
    """Bytes each layer saves for backward per sample, in `dtype`, the input excluded.

    The first layer's saved input is the batch itself, which DP counts as "input".
    """
    scale = _scale(workload, dtype)
    acts = [layer.activation_bytes * scale for layer in workload.layers]
    if acts:
        acts[0] -= min(acts[0], float(workload.input_bytes))
    return acts


def bytes_at_loss(workload: Workload, config: DPConfig) -> list[dict[str, int]]:
    """Bytes per category each device holds when the loss is computed (steady state).

    Device 0 keeps the optimizer state, the gathered outputs, what the loss saves for
    backward and (input_on="device0") the whole batch; every device that got a chunk
    holds a replica of the parameters, its input chunk and its activations.
    """
    sizes = device_batch_sizes(config.batch_size, config.n_devices)
    used = sum(1 for b in sizes if b)
    scale = _scale(workload, config.dtype)
    act_per_sample = sum(activation_bytes_per_layer(workload, config.dtype))
    b = config.batch_size
    params = DTYPE_BYTES[config.dtype] * workload.n_params
    rows = []
    for d, bd in enumerate(sizes):
        zero = d == 0
        rows.append({
            "parameters": params if zero or (used > 1 and bd) else 0,
            "optimizer": optimizer_state_bytes(workload.n_params, workload.n_param_tensors,
                                               config.optimizer, False, config.dtype)
            if zero else 0,
            "input": workload.input_bytes * (b if zero and config.input_on == "device0"
                                             else bd),
            "activations": int(act_per_sample * bd),
            "outputs": workload.output_bytes(bd, config.dtype) if zero and used == 1 else 0,
            "gathered": workload.output_bytes(b, config.dtype) if zero and used > 1 else 0,
            "loss": int(workload.loss_bytes * b * scale) if zero else 0,
            "gradients": 0,
        })
    return rows


def device0_extra_bytes(workload: Workload, config: DPConfig) -> dict[str, int]:
    """Bytes per category device 0 holds at the loss beyond device 1 (needs n_devices >= 2)."""
    require_int("n_devices", config.n_devices, 2)
    rows = bytes_at_loss(workload, config)
    return {cat: rows[0][cat] - rows[1][cat] for cat in rows[0]}


def _ops(layer: Layer) -> int:
    return OPS_PER_LAYER if layer.flops or layer.output_bytes else 0


def _copy_s(nbytes: int, link: Link) -> float:
    return link.latency_us * 1e-6 + nbytes / (link.bandwidth_GBps * 1e9)


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


def simulate(workload: Workload, cluster: Cluster, config: DPConfig) -> Trace:
    """Timeline and memory per device of one DataParallel training step.

    Streams per device: "python" (the thread driving it: kind "python" while it holds the
    GIL, "gil_wait" while it waits), "compute" (kernels), "comm" (copies); device 0 also has
    "main", the main thread. meta: step_time_s, samples_per_s, chunk_sizes,
    n_devices_used, peak_bytes (per device), imbalance (device 0 peak / largest other),
    python_s (seconds some thread held the GIL), phases ({kind: [start_s, end_s]}).
    """
    require_int("n_devices", config.n_devices, 1, cluster.devices_per_node)
    dev, link, dt = cluster.device, cluster.intra_node, config.dtype
    sizes = scatter_sizes(config.batch_size, config.n_devices)
    used = len(sizes)
    scale = _scale(workload, dt)
    op_s = (dev.op_overhead_us if config.python_op_us is None else config.python_op_us) * 1e-6
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
    src_link = PCIE4_X16 if config.input_on == "host" else link
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
        bcast = collective_time_s("broadcast", param_bytes, used, link)
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
            ks.append(forward_time_s(layer, sizes[d], dev, dt, workload.dtype) - n * op_s)
            segs += [("gil", n * gil_s), ("free", n * launch_s + (ks[-1] if sync_cpu else 0))]
        threads.append(segs)
        kernels.append(ks)
    threads.append([("free", host)] + [("gil", start_s)] * (used if used > 1 else 0))
    gil = schedule(threads, n_cores=None)
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
    trace.meta["loss_time_s"] = loss_end

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
        red = collective_time_s("reduce", param_bytes, used, link)
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
    _finish_meta(trace, config, sizes, end, gil_s)
    return trace


def _finish_meta(trace: Trace, config: DPConfig, sizes: list[int], end_s: float,
                 gil_s: float) -> None:
    peaks = [trace.peak_memory(d) for d in range(config.n_devices)]
    others = max(peaks[1:], default=0)
    phases: dict[str, list[float]] = {}
    for ev in trace.events:
        kind = "backward" if ev.kind == "grad_scatter" else ev.kind
        if kind in PHASES:
            span = phases.setdefault(kind, [ev.start_s, ev.end_s])
            span[0], span[1] = min(span[0], ev.start_s), max(span[1], ev.end_s)
    held = sum(e.duration_s for e in trace.events if e.kind == "python")
    trace.meta.update({
        "step_time_s": end_s,
        "samples_per_s": config.batch_size / end_s if end_s > 0 else float("inf"),
        "chunk_sizes": sizes,
        "n_devices_used": len(sizes),
        "peak_bytes": peaks,
        "imbalance": peaks[0] / others if others else float("inf"),
        "python_s": held,
        "gil_s_per_op": gil_s,
        "phases": phases,
    })
