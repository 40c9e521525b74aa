"""Valid calls of every public entry point of the simulator wing (see `api_surface`).

The base values are small (a 2-layer transformer, one 8-GPU node) so that one call takes
milliseconds; each is a valid input that the simulator must accept.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from benchmarks.api_surface import (
    CHOICES,
    DATA,
    FLOATS,
    INTS,
    OBJECTS,
    SHAPE,
    SHAPES,
    Arg,
    EntryPoint,
    choice,
    flag,
    integer,
    label,
    obj,
    real,
)
from dpsim.sim import hardware, planner, trace, workload
from dpsim.sim.collectives import cost, fit, ring, schedule, series
from dpsim.sim.cost import compute, compute_contention, fsdp_shards, gil, memory
from dpsim.sim.strategies import base, ddp, dp, fsdp, single

DTYPES = tuple(workload.DTYPE_BYTES)
NAN, INF = math.nan, math.inf

TINY = workload.transformer("tiny", 2, 64, 4, 32, 128)
H100 = hardware.H100_80GB
NVLINK = hardware.NVLINK4
NODE = hardware.get_cluster("h100-node")
IB4 = hardware.get_cluster("h100-ib-4")
SINGLE_TRACE = single.simulate(TINY, H100, single.SingleConfig(8))
DP_TRACE = dp.simulate(TINY, NODE, dp.DPConfig(4, 32))
DDP_TRACE = ddp.simulate(TINY, NODE, ddp.DDPConfig(8))
FSDP_TRACE = fsdp.simulate(TINY, NODE, fsdp.FSDPConfig(8))
ROUNDS = tuple(schedule.schedule("all_reduce", 4096, 4))
CURVE = tuple(planner.scaling_curve(TINY, NODE, "ddp", 64, n_devices=(1, 2, 4, 8)))
TENSORS = (ddp.GradTensor("w1", 1024, 0), ddp.GradTensor("w2", 2048, 1))
LAYER = TINY.layers[1]


def trace_arg(name: str, value: trace.Trace) -> Arg:
    """A trace argument: wrong types, an empty trace and another strategy's trace."""
    other = SINGLE_TRACE if value is not SINGLE_TRACE else DDP_TRACE
    return obj(name, value, extra=(("empty_trace", trace.Trace()), ("other_trace", other)))


COLL = choice("collective", "all_reduce", cost.COLLECTIVES)
ALGO = choice("algorithm", "ring", cost.ALGORITHMS)
OPT = choice("optimizer", "adam", memory.OPTIMIZERS)
WS = integer("world_size", 8)
NB = integer("nbytes", 2**20)
LINK = obj("link", NVLINK)
WL = obj("workload", TINY)
CL = obj("cluster", NODE)
DEV = obj("device", H100)
STAGE = choice("stage", 3, memory.ZERO_STAGES)
PREC = choice("precision", "mixed", planner.PLAN_PRECISIONS)


def _then_device(d: hardware.Device) -> float:
    return compute.step_compute_s(TINY, 8, d, "fp32")


def _then_link(link: hardware.Link) -> float:
    return cost.collective_time_s("all_reduce", 2**20, 8, link)


def _then_cluster(c: hardware.Cluster) -> base.StepResult:
    return ddp.step_result(ddp.simulate(TINY, c))


def _then_workload(w: workload.Workload) -> base.StepResult:
    return single.step_result(single.simulate(w, H100, single.SingleConfig(8)))


def _then_layer(layer: workload.Layer) -> base.StepResult:
    return _then_workload(workload.Workload("one layer", (layer,)))


def _trace(source: str, events: Any, memory: Any) -> trace.Trace:
    """A Trace from copies of the caller's lists (the base lists stay untouched)."""
    def copy(rows: Any) -> Any:
        return list(rows) if isinstance(rows, list) else rows  # a non-list goes in as given

    return trace.Trace(source, copy(events), copy(memory))


def _trace_sample(device: Any, time_s: Any, category: Any, nbytes: Any) -> trace.Trace:
    """A fresh Trace after one `Trace.sample` call."""
    t = trace.Trace()
    t.sample(device, time_s, category, nbytes)
    return t


def _hardware() -> tuple[EntryPoint, ...]:
    return (
        EntryPoint("hardware.Device", hardware.Device, (
            label("name", "toy"), choice("kind", "gpu", ("gpu", "cpu")), real("memory_GiB", 80.0),
            real("fp32_tflops", 67.0), real("bf16_tflops", 989.0), real("mem_bw_GBps", 3350.0),
            real("op_overhead_us", 5.0), real("efficiency", 0.6)), then=_then_device),
        EntryPoint("hardware.Link", hardware.Link, (
            label("name", "toy"), real("bandwidth_GBps", 450.0), real("latency_us", 3.0),
            choice("kind", "nvlink", hardware.LINK_KINDS)), then=_then_link),
        EntryPoint("hardware.Cluster", hardware.Cluster, (
            label("name", "toy"), DEV, integer("devices_per_node", 8), integer("n_nodes", 2),
            obj("intra_node", NVLINK), obj("inter_node", hardware.INFINIBAND_NDR, optional=True),
            integer("nics_per_node", 0), flag("nvls", True)), then=_then_cluster),
        EntryPoint("hardware.Device.tflops", H100.tflops, (choice("dtype", "bf16", DTYPES),)),
        EntryPoint("hardware.Cluster.link_for", IB4.link_for, (integer("n_devices", 16),)),
        EntryPoint("hardware.Cluster.with_devices", NODE.with_devices, (integer("n_devices", 16),)),
        EntryPoint("hardware.get_device", hardware.get_device,
                   (choice("name", "h100-80gb", (*hardware.DEVICES, "this-cpu")),)),
        EntryPoint("hardware.get_cluster", hardware.get_cluster,
                   (choice("name", "h100-node", hardware.CLUSTERS),)),
        EntryPoint("hardware.cpu_device", hardware.cpu_device,
                   (integer("n_cores", 4, optional=True),)),
    )


def _workload() -> tuple[EntryPoint, ...]:
    return (
        EntryPoint("workload.Layer", workload.Layer, (
            label("name", "fc"), label("kind", "Linear"), integer("n_params", 4096),
            integer("n_param_tensors", 2), integer("activation_bytes", 256),
            integer("output_bytes", 256), real("flops", 8192.0)), then=_then_layer),
        EntryPoint("workload.Workload", workload.Workload, (
            label("name", "toy"), Arg("layers", TINY.layers, OBJECTS),
            choice("dtype", "bf16", DTYPES), integer("input_bytes", 64), integer("loss_bytes", 64)),
            then=_then_workload),
        EntryPoint("workload.Workload.activation_bytes", TINY.activation_bytes, (
            integer("batch_size", 8), choice("dtype", "fp32", DTYPES, optional=True))),
        EntryPoint("workload.Workload.output_bytes", TINY.output_bytes, (
            integer("batch_size", 8), choice("dtype", "fp32", DTYPES, optional=True))),
        EntryPoint("workload.transformer", workload.transformer, (
            label("name", "toy"), integer("n_layers", 2), integer("d_model", 64),
            integer("n_heads", 4), integer("seq_len", 32), integer("vocab", 128),
            integer("d_ff", 256, optional=True),
            integer("n_kv_heads", 2, optional=True), flag("gated_mlp", False))),
        EntryPoint("workload.resnet50", workload.resnet50),
        EntryPoint("workload.get_workload", workload.get_workload,
                   (choice("name", "gpt2-124m", workload.PRESETS),)),
    )


def _trace_entries() -> tuple[EntryPoint, ...]:
    ev = SINGLE_TRACE.events[:3]
    mem = SINGLE_TRACE.memory[:3]
    bad_event = {"device": 0, "stream": "compute", "kind": "forward", "start_s": NAN,
                 "end_s": 1.0}
    return (
        EntryPoint("trace.Event", trace.Event, (
            integer("device", 0), label("stream", "compute"), label("kind", "forward"),
            real("start_s", 0.0), real("end_s", 1e-3), integer("nbytes", 0), label("label", "fc"))),
        EntryPoint("trace.MemorySample", trace.MemorySample, (
            integer("device", 0), real("time_s", 0.0), label("category", "activations"),
            integer("nbytes", 1024))),
        EntryPoint("trace.Trace", _trace, (
            choice("source", "simulated", trace.SOURCES), Arg("events", ev, OBJECTS),
            Arg("memory", mem, OBJECTS))),
        EntryPoint("trace.Trace.sample", _trace_sample, (
            integer("device", 0), real("time_s", 0.0), label("category", "activations"),
            integer("nbytes", 1024))),
        EntryPoint("trace.Trace.busy_s", SINGLE_TRACE.busy_s, (
            integer("device", 0), label("stream", "compute"))),
        EntryPoint("trace.Trace.peak_memory", SINGLE_TRACE.peak_memory, (integer("device", 0),)),
        EntryPoint("trace.Trace.from_dict", trace.Trace.from_dict, (
            Arg("data", SINGLE_TRACE.to_dict(), DATA, extra=(
                ("unknown_source", {"source": "guessed"}),
                ("event_missing_fields", {"events": [{"device": 0}]}),
                ("event_nan_start", {"events": [bad_event]}),
                ("sample_negative_bytes", {"memory": [
                    {"device": 0, "time_s": 0.0, "category": "x", "nbytes": -1}]}))),)),
    )


def _memory() -> tuple[EntryPoint, ...]:
    m = memory
    return (
        EntryPoint("memory.optimizer_state_bytes", m.optimizer_state_bytes, (
            integer("n_params", 1000), integer("n_param_tensors", 4), OPT,
            flag("mixed_precision", False), choice("state_dtype", "fp32", DTYPES))),
        EntryPoint("memory.model_state_bytes", m.model_state_bytes, (
            integer("n_params", 1000), integer("n_param_tensors", 4),
            choice("dtype", "bf16", DTYPES), OPT, flag("mixed_precision", True))),
        EntryPoint("memory.bytes_per_param", m.bytes_per_param,
                   (OPT, flag("mixed_precision", True))),
        EntryPoint("memory.predict_single", m.predict_single, (
            WL, integer("batch_size", 8), OPT, choice("dtype", "fp32", DTYPES),
            flag("mixed_precision", False))),
        EntryPoint("memory.max_batch_size", m.max_batch_size, (
            WL, integer("memory_bytes", 2**30), OPT, choice("dtype", "fp32", DTYPES),
            flag("mixed_precision", False), integer("limit", 1 << 20))),
        EntryPoint("memory.zero_bytes_per_device", m.zero_bytes_per_device, (
            integer("n_params", 10**6), WS, STAGE, integer("param_bytes", 2),
            integer("grad_bytes", 2), integer("optimizer_bytes", 12))),
        EntryPoint("memory.precision_dtype", m.precision_dtype, (PREC,)),
        EntryPoint("memory.precision_bytes_per_param", m.precision_bytes_per_param,
                   (choice("precision", "mixed", m.PRECISIONS), OPT)),
        EntryPoint("memory.zero_sharded_fraction", m.zero_sharded_fraction, (STAGE, WS)),
        EntryPoint("memory.max_params_that_fit", m.max_params_that_fit, (
            integer("memory_bytes", 80 * 2**30), WS, STAGE, integer("param_bytes", 2),
            integer("grad_bytes", 2), integer("optimizer_bytes", 12),
            integer("reserved_bytes", 0))),
        EntryPoint("memory.checkpointed_activation_bytes", m.checkpointed_activation_bytes, (
            WL, integer("batch_size", 8), choice("dtype", "fp32", DTYPES, optional=True))),
        EntryPoint("fsdp_shards.fsdp_shard_rows", fsdp_shards.fsdp_shard_rows, (
            integer("dim0", 10), integer("world_size", 4), integer("rank", 1))),
        EntryPoint("fsdp_shards.fsdp_shard_numel", fsdp_shards.fsdp_shard_numel, (
            Arg("shape", (10, 4), SHAPE), integer("world_size", 4), integer("rank", 1))),
        EntryPoint("fsdp_shards.fsdp_padded_shard_numel", fsdp_shards.fsdp_padded_shard_numel, (
            Arg("shape", (10, 4), SHAPE), integer("world_size", 4))),
        EntryPoint("fsdp_shards.fsdp_rank_bytes", fsdp_shards.fsdp_rank_bytes, (
            Arg("param_shapes", ((10, 4), (4,)), SHAPES), integer("world_size", 4),
            integer("rank", 1), choice("dtype", "fp32", DTYPES), OPT, flag("padded", False))),
    )


def _compute() -> tuple[EntryPoint, ...]:
    layer_args = (obj("layer", LAYER), integer("batch_size", 8), DEV,
                  choice("dtype", "bf16", DTYPES), choice("captured_dtype", "bf16", DTYPES))
    return (
        EntryPoint("compute.forward_time_s", compute.forward_time_s, layer_args),
        EntryPoint("compute.backward_time_s", compute.backward_time_s, layer_args),
        EntryPoint("compute.optimizer_time_s", compute.optimizer_time_s, (
            integer("n_params", 10**6), integer("n_param_tensors", 10), DEV, OPT)),
        EntryPoint("compute.step_compute_s", compute.step_compute_s, (
            WL, integer("batch_size", 8), DEV, choice("dtype", "bf16", DTYPES), OPT)),
        EntryPoint("compute_contention.spare_cores", compute_contention.spare_cores, (
            integer("cores", 2), integer("ranks_per_host", 2), integer("threads_per_rank", 1))),
        EntryPoint("compute_contention.comm_overlaps_compute",
                   compute_contention.comm_overlaps_compute, (
                       choice("kind", "cpu", ("cpu", "gpu")), integer("cores", 2),
                       integer("ranks_per_host", 2), integer("threads_per_rank", 1))),
    )


def _gil() -> tuple[EntryPoint, ...]:
    threads = [[("gil", 1e-3), ("free", 1e-3)]] * 2
    return (
        EntryPoint("gil.GILConfig", gil.GILConfig, (
            integer("n_threads", 2), real("work_s", 0.01), real("gil_share", 0.5),
            integer("n_ops", 10), real("switch_interval_s", 0.005),
            integer("n_cores", 2, optional=True)),
            then=gil.simulate),
        EntryPoint("gil.predict_speedup", gil.predict_speedup, (
            real("gil_share", 0.5), integer("n_threads", 4), integer("n_cores", 2, optional=True))),
        EntryPoint("gil.predict_time_s", gil.predict_time_s, (
            real("work_s", 1.0), real("gil_share", 0.5), integer("n_threads", 4),
            integer("n_cores", 2, optional=True))),
        EntryPoint("gil.thread_segments", gil.thread_segments, (obj("config", gil.GILConfig()),)),
        EntryPoint("gil.schedule", gil.schedule, (
            Arg("threads", threads, DATA, extra=(
                ("empty", []), ("empty_thread", [[]]), ("unknown_kind", [[("cuda", 0.1)]]),
                ("negative_seconds", [[("gil", -0.1)]]), ("nan_seconds", [[("gil", NAN)]]),
                ("inf_seconds", [[("gil", INF)]]), ("not_pairs", [["gil"]]))),
            real("switch_interval_s", 0.005), integer("n_cores", 2, optional=True))),
        EntryPoint("gil.simulate", gil.simulate, (obj("config", gil.GILConfig()),)),
        EntryPoint("gil.speedup_curve", gil.speedup_curve, (
            real("gil_share", 0.5), Arg("thread_counts", (1, 2, 4), INTS), real("work_s", 0.01),
            integer("n_ops", 10), real("switch_interval_s", 0.005),
            integer("n_cores", 2, optional=True))),
    )


def _collectives() -> tuple[EntryPoint, ...]:
    arrays = [np.arange(6.0), np.arange(6.0) + 1, np.arange(6.0) + 2]
    arrays_extra: tuple[tuple[str, Any], ...] = (("empty", []), ("two_d", [np.zeros((2, 2))] * 2),
                    ("unequal_lengths", [np.zeros(3), np.zeros(4)]), ("elem_str", ["ab", "cd"]))
    sizes = (2**10, 2**20, 2**24)
    times = tuple(cost.collective_time_s("all_reduce", s, 8, NVLINK) for s in sizes)
    measured = {"torch": {1024: 1e-4, 2**20: 1e-3}}
    return (
        EntryPoint("collectives.cost.tree_levels", cost.tree_levels, (WS,)),
        EntryPoint("collectives.cost.cost_terms", cost.cost_terms, (COLL, WS, ALGO)),
        EntryPoint("collectives.cost.collective_time_s", cost.collective_time_s,
                   (COLL, NB, WS, LINK, ALGO)),
        EntryPoint("collectives.cost.bus_bandwidth_factor", cost.bus_bandwidth_factor,
                   (COLL, WS)),
        EntryPoint("collectives.cost.algbw_GBps", cost.algbw_GBps, (NB, real("time_s", 1e-3))),
        EntryPoint("collectives.cost.busbw_GBps", cost.busbw_GBps,
                   (COLL, NB, WS, real("time_s", 1e-3))),
        EntryPoint("collectives.cost.bytes_sent_per_rank", cost.bytes_sent_per_rank,
                   (COLL, NB, WS, ALGO)),
        EntryPoint("collectives.cost.bytes_received_per_rank", cost.bytes_received_per_rank,
                   (COLL, NB, WS, ALGO)),
        EntryPoint("collectives.cost.ring_bytes_per_rank_formula",
                   cost.ring_bytes_per_rank_formula, (NB, WS)),
        EntryPoint("collectives.ring.chunk_bounds", ring.chunk_bounds,
                   (integer("length", 10), integer("n_chunks", 4))),
        EntryPoint("collectives.ring.ring_all_reduce_steps", ring.ring_all_reduce_steps,
                   (Arg("arrays", arrays, DATA, extra=arrays_extra),),
                   skip=frozenset({"buffers"})),  # the caller's data, summed
        EntryPoint("collectives.ring.ring_reduce_scatter", ring.ring_reduce_scatter,
                   (Arg("arrays", arrays, DATA, extra=arrays_extra),)),
        EntryPoint("collectives.schedule.schedule", schedule.schedule, (COLL, NB, WS, ALGO)),
        EntryPoint("collectives.schedule.round_time_s", schedule.round_time_s,
                   (obj("rnd", ROUNDS[0]), integer("world_size", 4), LINK)),
        EntryPoint("collectives.schedule.simulated_time_s", schedule.simulated_time_s,
                   (Arg("rounds", ROUNDS, OBJECTS), integer("world_size", 4), LINK)),
        EntryPoint("collectives.schedule.traffic_per_rank", schedule.traffic_per_rank,
                   (Arg("rounds", ROUNDS, OBJECTS), integer("world_size", 4))),
        EntryPoint("collectives.fit.fit_link", fit.fit_link, (
            Arg("sizes_bytes", sizes, INTS), Arg("times_s", times, FLOATS), integer("n_alpha", 14),
            real("s_over_b", 1.75), label("name", "fitted"),
            choice("weighting", "relative", fit.WEIGHTINGS))),
        EntryPoint("collectives.series.rank_traffic", series.rank_traffic, (
            COLL, NB, integer("world_size", 4),
            Arg("algorithms", ("naive", "tree", "ring"), CHOICES, cost.ALGORITHMS))),
        EntryPoint("collectives.series.bandwidth_series", series.bandwidth_series, (
            Arg("measured", measured, DATA, extra=(
                ("negative_time", {"torch": {1024: -1e-4}}), ("nan_time", {"torch": {1024: NAN}}),
                ("zero_time", {"torch": {1024: 0.0}}), ("negative_size", {"torch": {-1: 1e-4}}),
                ("str_size", {"torch": {"1 KiB": 1e-4}}))),
            integer("world_size", 4), COLL)),
        EntryPoint("collectives.series.model_series", series.model_series, (
            COLL, integer("world_size", 4), LINK, Arg("sizes_bytes", (1024, 2**20), INTS),
            Arg("algorithms", cost.ALGORITHMS, CHOICES, cost.ALGORITHMS))),
    )


def simulator_entry_points() -> tuple[EntryPoint, ...]:
    """Every entry point of the simulator wing."""
    from benchmarks.api_table_precision import precision_entry_points
    from benchmarks.api_table_strategies import strategy_entry_points
    from benchmarks.api_table_topology import topology_entry_points

    return (_hardware() + _workload() + _trace_entries() + _memory() + _compute() + _gil()
            + _collectives() + strategy_entry_points() + topology_entry_points()
            + precision_entry_points())

