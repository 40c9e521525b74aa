"""Valid calls of the strategies (single, DP, DDP, FSDP), the registry and the planner."""

from __future__ import annotations

from typing import Any

from benchmarks.api_surface import (
    CHOICES,
    INTS,
    OBJECTS,
    Arg,
    EntryPoint,
    choice,
    flag,
    integer,
    label,
    obj,
    real,
)
from benchmarks.api_table import (
    CL,
    CURVE,
    DDP_TRACE,
    DEV,
    DP_TRACE,
    DTYPES,
    FSDP_TRACE,
    H100,
    NAN,
    NODE,
    OPT,
    PREC,
    SINGLE_TRACE,
    STAGE,
    TENSORS,
    TINY,
    WL,
    trace_arg,
)
from dpsim.sim import planner
from dpsim.sim.collectives.cost import ALGORITHMS
from dpsim.sim.cost.memory import PRECISIONS, ZERO_STAGES
from dpsim.sim.strategies import base, ddp, dp, fsdp, registry, single
from dpsim.sim.strategies.fsdp import hsdp
from dpsim.sim.workload import PRESETS

ALGO = choice("algorithm", "ring", ALGORITHMS)
STRATEGY = choice("strategy", "ddp", registry.names())


def _then_single(cfg: single.SingleConfig) -> Any:
    t = single.simulate(TINY, H100, cfg)
    return single.step_result(t), single.summary(t)


def _then_dp(cfg: dp.DPConfig) -> Any:
    t = dp.simulate(TINY, NODE, cfg)
    return dp.step_result(t), dp.summary(t)


def _then_ddp(cfg: ddp.DDPConfig) -> Any:
    return ddp.step_result(ddp.simulate(TINY, NODE, cfg))


def _then_fsdp(cfg: fsdp.FSDPConfig) -> Any:
    t = fsdp.simulate(TINY, NODE, cfg)
    return fsdp.step_result(t), fsdp.summary(t)


def _then_hsdp(cfg: hsdp.HSDPConfig) -> Any:
    t = hsdp.simulate(TINY, NODE, cfg)
    return hsdp.step_result(t), hsdp.traffic_of(t)


HSDP_TRACE = hsdp.simulate(TINY, NODE, hsdp.HSDPConfig(8, shard_size=4))


def _hsdp() -> tuple[EntryPoint, ...]:
    return (
        EntryPoint("strategies.fsdp.hsdp.HSDPConfig", hsdp.HSDPConfig, (
            integer("batch_size", 8), integer("shard_size", 4),
            choice("precision", "mixed", PRECISIONS), OPT, flag("reshard_after_forward", True),
            integer("layers_per_unit", 1), ALGO), then=_then_hsdp),
        EntryPoint("strategies.fsdp.hsdp.hsdp_traffic", hsdp.hsdp_traffic, (
            integer("n_params", 10**6), integer("world_size", 8), integer("shard_size", 4),
            integer("bytes_per_param", 2), flag("reshard_after_forward", True))),
        EntryPoint("strategies.fsdp.hsdp.require_shard_size", hsdp.require_shard_size, (
            integer("shard_size", 4), integer("world_size", 8))),
        EntryPoint("strategies.fsdp.hsdp.simulate", hsdp.simulate,
                   (WL, CL, obj("config", hsdp.HSDPConfig(8, shard_size=4)))),
        EntryPoint("strategies.fsdp.hsdp.step_result", hsdp.step_result,
                   (trace_arg("trace", HSDP_TRACE),)),
        EntryPoint("strategies.fsdp.hsdp.traffic_of", hsdp.traffic_of,
                   (trace_arg("trace", HSDP_TRACE),)),
    )


def _base_single() -> tuple[EntryPoint, ...]:
    return (
        EntryPoint("strategies.base.StepResult", base.StepResult, (
            real("step_s", 1.0), real("compute_s", 0.8), real("hidden_comm_s", 0.1),
            real("exposed_comm_s", 0.2), real("other_s", 0.0), Arg("peak_bytes", (100, 100), INTS),
            integer("sent_bytes_per_device", 10), integer("batch_per_device", 8),
            integer("n_devices", 2))),
        EntryPoint("strategies.base.split_evenly", base.split_evenly,
                   (integer("n_devices", 4), integer("global_batch", 32))),
        EntryPoint("strategies.single.SingleConfig", single.SingleConfig, (
            integer("batch_size", 8), OPT, choice("dtype", "fp32", DTYPES),
            flag("mixed_precision", False)), then=_then_single),
        EntryPoint("strategies.single.simulate", single.simulate,
                   (WL, DEV, obj("config", single.SingleConfig(8)))),
        EntryPoint("strategies.single.step_result", single.step_result,
                   (trace_arg("trace", SINGLE_TRACE),)),
        EntryPoint("strategies.single.summary", single.summary,
                   (trace_arg("trace", SINGLE_TRACE),)),
        EntryPoint("strategies.single.breakdown", single.breakdown,
                   (trace_arg("trace", SINGLE_TRACE),)),
        EntryPoint("strategies.single.fit_rows", single.fit_rows, (
            Arg("models", ("gpt2-124m",), CHOICES, PRESETS), DEV, integer("batch_size", 1))),
    )


def _dp() -> tuple[EntryPoint, ...]:
    m = dp
    cfg = obj("config", m.DPConfig(4, 32))
    return (
        EntryPoint("strategies.dp.DPConfig", m.DPConfig, (
            integer("n_devices", 4), integer("batch_size", 32), OPT,
            choice("dtype", "fp32", DTYPES), choice("input_on", "device0", m.INPUT_PLACES),
            real("python_op_us", 2.0, optional=True, extra=(("above_device_overhead", 10.0),)),
            real("op_gil_share", 0.6), real("replicate_us_per_module", 20.0),
            real("thread_start_us", 60.0)), then=_then_dp),
        EntryPoint("strategies.dp.with_output_features", m.with_output_features,
                   (WL, integer("out_features", 10))),
        EntryPoint("strategies.dp.scatter_sizes", m.scatter_sizes,
                   (integer("batch_size", 10), integer("n_devices", 4))),
        EntryPoint("strategies.dp.device_batch_sizes", m.device_batch_sizes,
                   (integer("batch_size", 10), integer("n_devices", 4))),
        EntryPoint("strategies.dp.dtype_scale", m.dtype_scale,
                   (WL, choice("dtype", "fp32", DTYPES))),
        EntryPoint("strategies.dp.activation_bytes_per_layer",
                   m.activation_bytes_per_layer, (WL, choice("dtype", "fp32", DTYPES))),
        EntryPoint("strategies.dp.bytes_at_loss", m.bytes_at_loss, (WL, cfg)),
        EntryPoint("strategies.dp.device0_extra_bytes", m.device0_extra_bytes,
                   (WL, cfg)),
        EntryPoint("strategies.dp.simulate", dp.simulate, (WL, CL, cfg)),
        EntryPoint("strategies.dp.step_result", dp.step_result, (trace_arg("trace", DP_TRACE),)),
        EntryPoint("strategies.dp.summary", dp.summary, (trace_arg("trace", DP_TRACE),)),
    )


def _ddp() -> tuple[EntryPoint, ...]:
    # A GradTensor with negative bytes cannot be built (GradTensor is fuzzed on its own).
    tensors_extra = (("elem_str", ("w1",)), ("elem_none", (None,)))
    return (
        EntryPoint("strategies.ddp.DDPConfig", ddp.DDPConfig, (
            integer("batch_size", 8), real("bucket_cap_mb", 25.0), real("first_bucket_cap_mb", 1.0),
            flag("overlap", True), OPT, choice("dtype", "bf16", DTYPES), ALGO,
            flag("gradient_as_bucket_view", False), flag("mixed_precision", True),
            flag("first_iteration", False),
            flag("activation_checkpointing", False)), then=_then_ddp),
        EntryPoint("strategies.ddp.first_bucket_cap_for", ddp.first_bucket_cap_for,
                   (real("bucket_cap_mb", 10.0, optional=True),)),
        EntryPoint("strategies.ddp.first_iteration_buckets", ddp.first_iteration_buckets,
                   (Arg("tensors", TENSORS, OBJECTS, extra=tensors_extra),)),
        EntryPoint("strategies.ddp.GradTensor", ddp.GradTensor,
                   (label("name", "w"), integer("nbytes", 1024), integer("layer", 0))),
        EntryPoint("strategies.ddp.build_buckets", ddp.build_buckets, (
            Arg("tensors", TENSORS, OBJECTS, extra=tensors_extra), real("bucket_cap_mb", 25.0),
            real("first_bucket_cap_mb", 1.0),
            Arg("ready_order", None, CHOICES, ("w1", "w2"), optional=True,
                extra=(("duplicate", ("w1", "w1")), ("missing", ("w1",)))))),
        EntryPoint("strategies.ddp.grad_tensors", ddp.grad_tensors, (
            WL, choice("dtype", "bf16", DTYPES),
            Arg("names", (("block0.w", 1024),), OBJECTS, optional=True, extra=(
                ("negative_bytes", (("block0.w", -5),)), ("nan_bytes", (("block0.w", NAN),)),
                ("not_pairs", ("block0.w",)))))),
        EntryPoint("strategies.ddp.all_reduce_time_s", ddp.all_reduce_time_s, (
            integer("nbytes", 2**20), integer("world_size", 8), obj("link", NODE.intra_node),
            ALGO)),
        EntryPoint("strategies.ddp.simulate", ddp.simulate, (
            WL, CL, obj("config", ddp.DDPConfig(8), optional=True),
            Arg("tensors", None, OBJECTS, optional=True, extra=tensors_extra),
            Arg("ready_order", None, CHOICES, ("block1", "block0", "embedding"), optional=True))),
        EntryPoint("strategies.ddp.copy_time_s", ddp.copy_time_s, (integer("nbytes", 2**20), DEV)),
        EntryPoint("strategies.ddp.scaling", ddp.scaling, (
            WL, CL, obj("config", ddp.DDPConfig(8), optional=True),
            Arg("world_sizes", (1, 2, 4, 8), INTS))),
        EntryPoint("strategies.ddp.step_result", ddp.step_result,
                   (trace_arg("trace", DDP_TRACE), integer("device", 0))),
        EntryPoint("strategies.ddp.buckets_of", ddp.buckets_of, (trace_arg("trace", DDP_TRACE),)),
    )


def _fsdp() -> tuple[EntryPoint, ...]:
    cfg = obj("config", fsdp.FSDPConfig(8))
    return (
        EntryPoint("strategies.fsdp.FSDPConfig", fsdp.FSDPConfig, (
            integer("batch_size", 8), STAGE, choice("precision", "mixed", PRECISIONS), OPT,
            flag("reshard_after_forward", True), flag("forward_prefetch", True),
            flag("backward_prefetch", True), flag("activation_checkpointing", False),
            integer("layers_per_unit", 1), ALGO, flag("offload", False)), then=_then_fsdp),
        EntryPoint("strategies.fsdp.communication_bytes_per_step",
                   fsdp.communication_bytes_per_step, (
                       integer("n_params", 10**6), integer("world_size", 8), STAGE,
                       integer("bytes_per_param", 2), flag("reshard_after_forward", True))),
        EntryPoint("strategies.fsdp.simulate", fsdp.simulate, (WL, CL, cfg)),
        EntryPoint("strategies.fsdp.compare_stages", fsdp.compare_stages, (
            WL, CL, cfg, Arg("stages", ZERO_STAGES, CHOICES, ZERO_STAGES))),
        EntryPoint("strategies.fsdp.step_result", fsdp.step_result,
                   (trace_arg("trace", FSDP_TRACE),)),
        EntryPoint("strategies.fsdp.summary", fsdp.summary, (trace_arg("trace", FSDP_TRACE),)),
        EntryPoint("strategies.fsdp.build_units", fsdp.build_units, (WL, CL, cfg)),
        EntryPoint("strategies.registry.get_strategy", registry.get_strategy,
                   (choice("name", "ddp", registry.names()),)),
        EntryPoint("strategies.registry.names", registry.names),
    )


def _planner() -> tuple[EntryPoint, ...]:
    p = planner
    devices = Arg("n_devices", (1, 2, 4, 8), INTS)
    return (
        EntryPoint("planner.check_batch", p.check_batch,
                   (STRATEGY, integer("n_devices", 8), integer("global_batch", 64))),
        EntryPoint("planner.plan", p.plan, (
            WL, CL, STRATEGY, integer("n_devices", 8), integer("global_batch", 64), PREC, OPT,
            flag("activation_checkpointing", False), flag("offload", False))),
        EntryPoint("planner.scaling_curve", p.scaling_curve, (
            WL, CL, STRATEGY, integer("batch", 64), choice("mode", "strong", p.MODES), devices,
            PREC, OPT, flag("activation_checkpointing", False), flag("offload", False))),
        EntryPoint("planner.efficiencies", p.efficiencies, (
            Arg("curve", CURVE, OBJECTS), choice("mode", "strong", p.MODES))),
        EntryPoint("planner.crossover_formula", p.crossover_formula, (
            real("c_s", 1e-3), integer("global_batch", 256), real("k", 2.0),
            integer("model_bytes", 250_000_000), integer("alpha_terms", 26),
            obj("link", NODE.intra_node), real("c0_s", 0.0))),
        EntryPoint("planner.hide_cost_s", p.hide_cost_s,
                   (WL, CL, choice("strategy", "fsdp", registry.names()), PREC)),
        EntryPoint("planner.crossover", p.crossover, (
            WL, CL, choice("strategy", "fsdp", ("ddp", "fsdp")), integer("global_batch", 256), PREC,
            devices)),
        EntryPoint("planner.summary_table", p.summary_table, (
            WL, CL, integer("n_devices", 8, optional=True),
            integer("global_batch", 64, optional=True), PREC,
            Arg("strategies", ("ddp", "fsdp"), CHOICES, registry.names(), optional=True))),
    )


def strategy_entry_points() -> tuple[EntryPoint, ...]:
    """The strategies, the registry and the planner."""
    return _base_single() + _dp() + _ddp() + _fsdp() + _hsdp() + _planner()
