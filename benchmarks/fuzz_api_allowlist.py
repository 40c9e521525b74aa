"""Perturbations the fuzz makes, and the explicit allowlist of those that are valid inputs.

`perturbations(arg)` lists (label, value) pairs by the argument's kind: wrong types (str,
list, None, dict), a bool where a number is meant, NaN, inf, -inf, negative, zero, huge
(10**9, 10**18), unknown names for choices, bad elements of sequences, and the argument's
own `extra` cases. Most are invalid; `ALLOWED` lists the ones that are valid inputs, with
why, so that the fuzz counts "accepted" only for silent acceptance of a truly invalid value.
A valid perturbation may be accepted, or refused by a ValueError naming its argument (a
documented cap); it must not hang, raise anything else, or return NaN, inf or negatives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from benchmarks.api_surface import (
    BOOL,
    CHOICE,
    CHOICES,
    DATA,
    FLOAT,
    FLOATS,
    INT,
    INTS,
    NAME,
    OBJECT,
    OBJECTS,
    SHAPE,
    SHAPES,
    Arg,
)

NAN, INF = math.nan, math.inf
UNKNOWN = "no-such-choice"
_NUMBER_EDGES: tuple[tuple[str, Any], ...] = (
    ("nan", NAN), ("inf", INF), ("-inf", -INF))


def _ints(arg: Arg) -> list[tuple[str, Any]]:
    return [("str", "8"), ("list", [8]), ("none", None), ("dict", {}), ("bool", True),
            ("float", 8.5), *_NUMBER_EDGES, ("negative", -1), ("zero", 0), ("1e9", 10**9),
            ("1e18", 10**18)]


def _floats(arg: Arg) -> list[tuple[str, Any]]:
    return [("str", "0.5"), ("list", [0.5]), ("none", None), ("dict", {}), ("bool", True),
            *_NUMBER_EDGES, ("negative", -1.0), ("zero", 0.0), ("1e9", 1e9), ("1e18", 1e18)]


def _choice(arg: Arg) -> list[tuple[str, Any]]:
    common: list[tuple[str, Any]] = [("none", None), ("list", [arg.value]), ("dict", {}),
                                     ("bool", True)]
    if all(isinstance(c, int) for c in arg.choices):  # e.g. a ZeRO stage
        top = max(arg.choices)
        return [("unknown", top + 1), ("negative", -1), ("float", 2.5), ("nan", NAN),
                ("str", str(arg.value)), *common]
    return [("unknown", UNKNOWN), ("empty", ""), ("int", 3), *common]


def _sequence(arg: Arg) -> list[tuple[str, Any]]:
    head = list(arg.value or [])[:-1]
    wrong: list[tuple[str, Any]] = [("str", "8"), ("none", None), ("int", 8), ("dict", {}),
                                    ("empty", [])]
    if arg.kind == INTS:
        return wrong + [(f"elem_{k}", [*head, v]) for k, v in (
            ("negative", -1), ("zero", 0), ("nan", NAN), ("str", "8"), ("bool", True),
            ("float", 2.5), ("1e18", 10**18))]
    if arg.kind == FLOATS:
        return wrong + [(f"elem_{k}", [*head, v]) for k, v in (
            ("nan", NAN), ("inf", INF), ("negative", -1.0), ("zero", 0.0), ("str", "0.5"))]
    if arg.kind == CHOICES:
        first = str(arg.value[0]) if arg.value else "x"
        unknown = max(arg.choices) + 1 if all(isinstance(c, int) for c in arg.choices) \
            else UNKNOWN
        return [("str", first), *wrong[1:], ("elem_unknown", [*list(arg.value or []), unknown]),
                ("elem_none", [*list(arg.value or []), None])]
    return [("str", "x"), *wrong[1:], ("elem_str", ["x"]), ("elem_none", [None])]  # OBJECTS


def _shapes(arg: Arg) -> list[tuple[str, Any]]:
    if arg.kind == SHAPE:
        return [("str", "10"), ("none", None), ("int", 10), ("dict", {}), ("empty", ()),
                ("elem_negative", (-1, 4)), ("elem_nan", (NAN, 4)), ("elem_str", ("10", 4)),
                ("elem_float", (2.5, 4))]
    return [("str", "x"), ("none", None), ("int", 10), ("dict", {}), ("empty", []),
            ("elem_negative", [(-1, 4)]), ("elem_str", ["ab"]), ("elem_int", [10])]


def perturbations(arg: Arg) -> list[tuple[str, Any]]:
    """(label, value) pairs for one argument; "none" is left out when None is valid."""
    by_kind = {
        INT: _ints, FLOAT: _floats, CHOICE: _choice,
        BOOL: lambda a: [("int0", 0), ("int1", 1), ("str", "yes"), ("none", None),
                         ("list", [True]), ("dict", {})],
        NAME: lambda a: [("none", None), ("int", 7), ("list", ["x"]), ("dict", {})],
        OBJECT: lambda a: [("str", "x"), ("none", None), ("int", 7), ("list", []),
                           ("dict", {})],
        INTS: _sequence, FLOATS: _sequence, CHOICES: _sequence, OBJECTS: _sequence,
        SHAPE: _shapes, SHAPES: _shapes,
        DATA: lambda a: [("str", "x"), ("none", None), ("int", 7),
                         ("dict", {}) if isinstance(a.value, list) else ("list", [])],
    }
    out = [p for p in by_kind[arg.kind](arg) if not (arg.optional and p[0] == "none")]
    return out + list(arg.extra)


@dataclass(frozen=True)
class Allow:
    """Perturbations `labels` of arguments `args` of entry points matching `entries` are
    valid inputs (fnmatch patterns over entry-point names)."""

    entries: str
    args: tuple[str, ...]
    labels: tuple[str, ...]
    why: str


ZERO_HUGE = ("zero", "1e9", "1e18")
HUGE = ("1e9", "1e18")
# Closed forms whose cost does not grow with the number of ranks: any world size is valid.
CLOSED_FORM_WORLD = (
    "collectives.cost.tree_levels", "collectives.cost.cost_terms",
    "collectives.cost.collective_time_s", "collectives.cost.bus_bandwidth_factor",
    "collectives.cost.busbw_GBps", "collectives.cost.ring_bytes_per_rank_formula",
    "collectives.series.model_series", "collectives.series.bandwidth_series",
    "memory.zero_bytes_per_device", "memory.zero_sharded_fraction",
    "memory.max_params_that_fit", "fsdp_shards.fsdp_*", "strategies.ddp.all_reduce_time_s",
    "strategies.fsdp.communication_bytes_per_step", "widgets.collectives_explorer.*",
)
ALLOWED: tuple[Allow, ...] = (
    Allow("hardware.Cluster", ("nics_per_node",), ("zero",),
          "documented: 0 NICs per node means one per device"),
    Allow("hardware.device_for_name", ("memory_bytes",), HUGE,
          "a device of 1 GB or of an exabyte: memory is reported, not allocated"),
    Allow("collectives.fit.fit_link", ("n_alpha",), ("zero",),
          "no latency term: a bandwidth-only fit (the sizes and s_over_b carry it)"),
    Allow("collectives.fit.fit_link", ("s_over_b",), ("zero",),
          "no bandwidth term: a latency-only fit"),
    Allow("trace.Trace.sample", ("nbytes",), ("float",),
          "documented: a float number of bytes is truncated to whole bytes"),
    Allow("*", ("nbytes",), ZERO_HUGE,
          "an empty or a huge message, sample or gradient: its cost is finite"),
    Allow("*", ("n_params", "n_param_tensors"), ZERO_HUGE,
          "a model or layer without parameters, or a huge one: bytes and seconds by formula"),
    Allow("workload.Layer", ("activation_bytes", "output_bytes", "flops"), ZERO_HUGE,
          "a layer that saves, outputs or computes nothing (ReLU, Flatten), or a lot"),
    Allow("workload.transformer", ("d_model", "seq_len", "vocab"), HUGE,
          "a huge model shape: parameters, bytes and FLOPs by formula"),
    Allow("workload.Workload", ("input_bytes", "loss_bytes"), ZERO_HUGE,
          "a model with no or huge inputs or loss state"),
    Allow("workload.Workload.*", ("batch_size",), ZERO_HUGE,
          "bytes of an empty or a huge batch (documented: batch_size >= 0)"),
    Allow("memory.predict_single", ("batch_size",), ZERO_HUGE,
          "memory of an empty (model states only) or a huge batch"),
    Allow("memory.checkpointed_activation_bytes", ("batch_size",), ZERO_HUGE,
          "activations of an empty or a huge batch"),
    Allow("compute.*", ("batch_size",), ZERO_HUGE,
          "seconds of an empty or a huge batch by the roofline formula"),
    Allow("memory.max_batch_size", ("memory_bytes", "limit"), ZERO_HUGE,
          "no memory (batch 0) or plenty of it; a limit of 0 caps the answer at 0"),
    Allow("memory.max_params_that_fit", ("memory_bytes", "reserved_bytes"), ZERO_HUGE,
          "no memory, or all of it reserved: 0 parameters fit"),
    Allow("memory.*", ("param_bytes", "grad_bytes", "optimizer_bytes"), ZERO_HUGE,
          "a state the optimizer does not keep (0 bytes), or any width"),
    Allow("strategies.fsdp.communication_bytes_per_step", ("bytes_per_param",), ZERO_HUGE,
          "bytes per parameter of any width"),
    *(Allow(e, ("world_size",), HUGE, "closed form: any number of ranks")
      for e in CLOSED_FORM_WORLD),
    Allow("gil.predict_*", ("n_threads", "n_cores"), HUGE,
          "the closed-form bound for any number of threads or cores"),
    Allow("gil.*", ("gil_share",), ("zero",), "all work in C code (documented: 0..1)"),
    Allow("gil.*", ("n_cores",), HUGE, "more cores than threads: every thread runs alone"),
    Allow("gil.schedule", ("threads",), ("empty_thread",), "a thread with nothing to do"),
    Allow("gil.predict_time_s", ("work_s",), ("zero",), "no work (documented: work_s >= 0)"),
    Allow("gil.*", ("work_s",), HUGE,
          "long threads: valid, so the simulation must refuse or finish them, not hang"),
    Allow("gil.*", ("switch_interval_s",), HUGE,
          "an interval longer than the work: no forced switch"),
    Allow("collectives.ring.chunk_bounds", ("length",), ZERO_HUGE,
          "an empty or a huge array cut into n_chunks chunks"),
    Allow("fsdp_shards.fsdp_shard_rows", ("dim0",), ZERO_HUGE, "a parameter with 0 or many rows"),
    Allow("fsdp_shards.fsdp_*", ("rank",), ("zero",), "rank 0 exists"),
    Allow("fsdp_shards.fsdp_*", ("shape",), ("empty",), "a scalar parameter: shape ()"),
    Allow("fsdp_shards.fsdp_rank_bytes", ("param_shapes",), ("empty",), "no parameters"),
    Allow("precision.fsdp_policy_rank_bytes", ("param_shapes",), ("empty",), "no parameters"),
    Allow("precision.fsdp_policy_rank_bytes", ("rank",), ("zero",), "rank 0 exists"),
    Allow("zero_partition.zero1_*", ("param_numels",), ("empty", "elem_zero", "elem_1e18"),
          "no parameter tensors, an empty one, or a huge one: bytes by formula"),
    Allow("hardware.Device", ("memory_GiB", "fp32_tflops", "bf16_tflops", "mem_bw_GBps",
                              "op_overhead_us"), HUGE,
          "a (hypothetical) very large or fast device: finite times"),
    Allow("hardware.Device", ("op_overhead_us",), ("zero",),
          "no cost per operator (documented: >= 0)"),
    Allow("hardware.Link", ("bandwidth_GBps", "latency_us"), HUGE,
          "a very fast or very slow link: finite times"),
    Allow("hardware.Link", ("latency_us",), ("zero",), "no latency (documented: >= 0)"),
    Allow("widgets.collectives_explorer.*", ("bandwidth_GBps", "latency_us"), HUGE,
          "a very fast or very slow link: finite times"),
    Allow("widgets.collectives_explorer.*", ("latency_us",), ("zero",), "no latency"),
    Allow("hardware.cpu_device", ("n_cores",), HUGE, "nominal throughput of any core count"),
    Allow("trace.*", ("device",), ZERO_HUGE,
          "any device index: one without events or samples holds 0 s and 0 bytes"),
    Allow("strategies.ddp.step_result", ("device",), ("zero",), "device 0 exists"),
    Allow("trace.Event", ("start_s", "end_s"), ZERO_HUGE, "an event at any time >= 0"),
    Allow("trace.*", ("time_s",), ZERO_HUGE, "a sample at any time >= 0"),
    Allow("collectives.cost.*", ("time_s",), HUGE, "a slow collective"),
    Allow("strategies.base.StepResult", ("step_s", "compute_s", "hidden_comm_s",
                                         "exposed_comm_s", "other_s", "sent_bytes_per_device",
                                         "batch_per_device"), ZERO_HUGE,
          "a record of any finite step (batch_per_device 0: not recorded, documented)"),
    Allow("strategies.base.StepResult", ("peak_bytes",), ("elem_zero", "elem_1e18"),
          "a device that holds nothing, or a lot"),
    Allow("strategies.dp.DPConfig", ("python_op_us", "replicate_us_per_module",
                                                 "thread_start_us"), ZERO_HUGE,
          "host costs of 0 or of any length (documented: >= 0)"),
    Allow("strategies.dp.DPConfig", ("python_op_us",), ("above_device_overhead",),
          "a host cost per operator above the device's own overhead (10 us vs 5 us)"),
    Allow("strategies.dp.DPConfig", ("op_gil_share",), ("zero",),
          "host cost all in C++ (documented: 0..1)"),
    Allow("strategies.dp.scatter_sizes", ("batch_size", "n_devices"), HUGE,
          "at most min(batch, N) chunks: cheap for any of them"),
    Allow("strategies.dp.device_batch_sizes", ("batch_size",), HUGE,
          "N chunks of a huge batch"),
    Allow("strategies.dp.with_output_features", ("out_features",), HUGE,
          "a huge classifier output: bytes by formula"),
    Allow("widgets.dp_explorer.*", ("out_features",), ZERO_HUGE,
          "0: the model's own output (documented); a huge classifier output"),
    Allow("strategies.ddp.build_buckets", ("bucket_cap_mb", "first_bucket_cap_mb"), HUGE,
          "a cap above the model: one bucket"),
    Allow("strategies.ddp.GradTensor", ("layer",), ZERO_HUGE,
          "a layer index (checked against a workload where there is one)"),
    Allow("strategies.ddp.grad_tensors", ("names",), ("empty",), "a model without parameters"),
    Allow("strategies.ddp.step_result", ("trace",), ("other_trace",),
          "any trace with events on the device: it also reads measured traces"),
    Allow("strategies.base.split_evenly", ("global_batch",), HUGE, "a huge batch splits evenly"),
    Allow("collectives.fit.fit_link", ("n_alpha", "s_over_b"), HUGE,
          "closed-form cost terms of any size"),
    Allow("planner.crossover_formula", ("c_s", "global_batch", "k", "model_bytes",
                                        "alpha_terms", "c0_s"), HUGE, "closed form"),
    Allow("planner.crossover_formula", ("c_s", "model_bytes", "alpha_terms", "c0_s"),
          ("zero",), "no cover, no model, no latency term, no fixed cover: still a formula"),
    Allow("widgets.zero_explorer.*", ("memory_GiB",), HUGE, "a device with plenty of memory"),
    Allow("collectives.fit.fit_link", ("sizes_bytes",), ("elem_zero", "elem_1e18"),
          "a timed 0-byte or huge message"),
    Allow("collectives.series.model_series", ("sizes_bytes",),
          ("empty", "elem_zero", "elem_1e18"), "no sizes, a 0-byte or a huge message"),
    Allow("*", ("layers", "events", "memory", "tensors", "rounds"), ("empty",),
          "an empty sequence of them is valid: nothing to do"),
    Allow("*", ("algorithms", "models", "strategies", "stages", "thread_counts",
                "world_sizes"), ("empty",), "no rows asked for: an empty result"),
)


def allowed(entry: str, arg: str, label: str) -> str | None:
    """Why perturbation `label` of `arg` of `entry` is a valid input; None when invalid."""
    for a in ALLOWED:
        if arg in a.args and label in a.labels and fnmatchcase(entry, a.entries):
            return a.why
    return None
