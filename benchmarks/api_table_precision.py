"""Valid calls of chapter 9's simulator modules: precision policies, ZeRO-1's partition and
the planner's knobs."""

from __future__ import annotations

from benchmarks.api_surface import INTS, SHAPES, Arg, EntryPoint, choice, flag, integer, obj
from benchmarks.api_table import OPT, STAGE, TINY
from dpsim.sim.cost import precision as pr
from dpsim.sim.cost import zero_partition as zp
from dpsim.sim.cost.memory import OPTIMIZERS, MemoryBreakdown
from dpsim.sim.hardware import get_cluster
from dpsim.sim.strategies import fsdp, knobs
from dpsim.sim.workload import DTYPE_BYTES

POLICY = pr.precision_policy("torch_amp")
NODE = get_cluster("h100-node")


def precision_entry_points() -> tuple[EntryPoint, ...]:
    """precision, zero_partition and strategies.knobs."""
    pol = obj("policy", POLICY)
    dtypes = tuple(DTYPE_BYTES)
    return (
        EntryPoint("precision.PrecisionPolicy", pr.PrecisionPolicy, (
            choice("name", "torch_amp", pr.POLICIES), choice("param_dtype", "fp32", dtypes),
            choice("compute_dtype", "bf16", dtypes), choice("grad_dtype", "fp32", dtypes),
            choice("reduce_dtype", "fp32", dtypes), choice("state_dtype", "fp32", dtypes),
            flag("master_copy", False))),
        EntryPoint("precision.precision_policy", pr.precision_policy, (
            choice("name", "torch_amp", pr.POLICIES), choice("low", "bf16", pr.LOW_DTYPES),
            choice("reduce_dtype", "fp32", dtypes, optional=True))),
        EntryPoint("precision.policy_model_state_bytes", pr.policy_model_state_bytes, (
            integer("n_params", 10**6), integer("n_param_tensors", 10), pol, OPT)),
        EntryPoint("precision.policy_bytes_per_param", pr.policy_bytes_per_param, (pol, OPT)),
        EntryPoint("precision.fsdp_policy_rank_bytes", pr.fsdp_policy_rank_bytes, (
            Arg("param_shapes", ((10, 4), (4,)), SHAPES), integer("world_size", 4),
            integer("rank", 1), pol, OPT, flag("padded", False))),
        EntryPoint("precision.zero_stage_bytes", pr.zero_stage_bytes, (
            integer("n_params", 10**6), integer("world_size", 8), STAGE, pol, OPT)),
        EntryPoint("precision.scheme_table", pr.scheme_table, (
            integer("n_params", 10**6), integer("world_size", 8),
            choice("optimizer", "adam", OPTIMIZERS), choice("low", "bf16", pr.LOW_DTYPES))),
        EntryPoint("precision.offloaded", pr.offloaded, (
            obj("breakdown", MemoryBreakdown(10, 10, 20, 5)), flag("offload", True))),
        EntryPoint("zero_partition.zero1_partition", zp.zero1_partition, (
            Arg("param_numels", [90, 30, 30, 5], INTS), integer("world_size", 2))),
        EntryPoint("zero_partition.zero1_optimizer_bytes", zp.zero1_optimizer_bytes, (
            Arg("param_numels", [90, 30, 30, 5], INTS), integer("world_size", 2), OPT,
            choice("state_dtype", "fp32", dtypes))),
        EntryPoint("strategies.knobs.base_precision", knobs.base_precision, (
            choice("precision", "torch_amp", knobs.KNOB_PRECISIONS),)),
        EntryPoint("strategies.knobs.apply_knobs", knobs.apply_knobs, (
            obj("config", fsdp.FSDPConfig(8)), choice("strategy", "fsdp", ("fsdp",)),
            choice("precision", "torch_amp", knobs.KNOB_PRECISIONS),
            flag("activation_checkpointing", True), flag("offload", True)),
            then=lambda cfg: fsdp.simulate(TINY, NODE, cfg)),
    )
