"""The simulator's face: everything outside `dpsim.sim` imports from here.

    from dpsim.sim import get_workload, get_cluster, DDPConfig, simulate, step_result, plan

The simulator is torch-free and deterministic: hardware, workloads, the trace, cost models,
collectives, strategies behind one registry, the planner, and its validation against
published numbers (`fidelity`). Inputs are checked here, once: every function in `__all__`
is wrapped by `checks.checked`, which checks each argument against its type hint (bounds
from `limits`), and the config and hardware dataclasses check their own fields. Inner
modules trust their typed inputs. A name missing here is the simulator's inside.
"""

from __future__ import annotations

import inspect

from dpsim.sim import fidelity
from dpsim.sim.beyond_data_parallel import beyond_data_parallel
from dpsim.sim.checks import (
    checked,
    require_bool,
    require_choice,
    require_finite,
    require_int,
    require_range,
    require_type,
)
from dpsim.sim.collectives import link_constants
from dpsim.sim.collectives.cost import (
    ALGORITHMS,
    COLLECTIVES,
    algbw_GBps,
    bus_bandwidth_factor,
    busbw_GBps,
    bytes_received_per_rank,
    bytes_sent_per_rank,
    collective_time_s,
    cost_terms,
)
from dpsim.sim.collectives.fit import fit_link
from dpsim.sim.collectives.group_cost import achieved_link
from dpsim.sim.collectives.nccl import GroupShape, choose, group_shape, nccl_time_s
from dpsim.sim.collectives.ring import RingStep, chunk_bounds, ring_all_reduce_steps
from dpsim.sim.collectives.series import (
    RankTraffic,
    SizeSeries,
    bandwidth_series,
    model_series,
    rank_traffic,
)
from dpsim.sim.cost.compute import (
    backward_time_s,
    forward_time_s,
    optimizer_time_s,
    step_compute_s,
)
from dpsim.sim.cost.compute_contention import comm_overlaps_compute
from dpsim.sim.cost.fsdp_shards import fsdp_padded_shard_numel, fsdp_rank_bytes, fsdp_shard_rows
from dpsim.sim.cost.gil import (
    DEFAULT_SWITCH_INTERVAL_S,
    GILConfig,
    predict_speedup,
    schedule,
)
from dpsim.sim.cost.gil import simulate as simulate_gil
from dpsim.sim.cost.memory import (
    CATEGORIES,
    OPTIMIZERS,
    PRECISIONS,
    MemoryBreakdown,
    checkpointed_activation_bytes,
    max_batch_size,
    max_params_that_fit,
    model_state_bytes,
    precision_bytes_per_param,
    predict_single,
    zero_bytes_per_device,
)
from dpsim.sim.cost.precision import (
    LOW_DTYPES,
    POLICIES,
    POLICY_SOURCES,
    PrecisionPolicy,
    policy_bytes_per_param,
    policy_model_state_bytes,
    precision_policy,
    scheme_table,
)
from dpsim.sim.cost.zero_partition import zero1_optimizer_bytes, zero1_partition
from dpsim.sim.fidelity.collectives import held_out_summary, load_runs, shipped_rows
from dpsim.sim.hardware import (
    CLUSTERS,
    DEVICES,
    H100_80GB,
    INFINIBAND_NDR,
    NVLINK2,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    PCIE3_X16,
    PCIE4_X16,
    PCIE5_X16,
    SHARED_MEMORY,
    Cluster,
    Device,
    Link,
    cpu_device,
    device_for_name,
    get_cluster,
    get_device,
)
from dpsim.sim.hardware.gpu_specs import SPECS, match_name
from dpsim.sim.limits import GiB
from dpsim.sim.planner import (
    POWERS_OF_TWO,
    Crossover,
    PlanResult,
    crossover,
    efficiencies,
    plan,
    scaling_curve,
    summary_table,
)
from dpsim.sim.strategies.base import StepResult
from dpsim.sim.strategies.ddp import (
    DEFAULT_BUCKET_CAP_MB,
    Bucket,
    DDPConfig,
    GradTensor,
    MiB,
    ScalingPoint,
    buckets_of,
    build_buckets,
    first_bucket_cap_for,
    grad_tensors,
    scaling,
)
from dpsim.sim.strategies.dispatch import simulate, step_result
from dpsim.sim.strategies.dp import (
    DPConfig,
    bytes_at_loss,
    device0_extra_bytes,
    scatter_sizes,
    with_output_features,
)
from dpsim.sim.strategies.dp import summary as dp_summary
from dpsim.sim.strategies.fsdp import FSDPConfig, communication_bytes_per_step, compare_stages
from dpsim.sim.strategies.fsdp import summary as fsdp_summary
from dpsim.sim.strategies.fsdp.hsdp import HSDPConfig, hsdp_traffic, traffic_of
from dpsim.sim.strategies.knobs import PLANNER_PRECISIONS, PRECISION_SETTINGS
from dpsim.sim.strategies.registry import get_strategy
from dpsim.sim.strategies.registry import names as strategy_names
from dpsim.sim.strategies.single import SingleConfig, breakdown, fit_rows
from dpsim.sim.strategies.single import summary as single_summary
from dpsim.sim.trace import Event, Trace
from dpsim.sim.workload import (
    DTYPE_BYTES,
    PRESETS,
    SAVES,
    Layer,
    Workload,
    get_workload,
    transformer,
)

__all__ = [  # noqa: RUF022 (grouped by topic, sorted within a group)
    # hardware
    "CLUSTERS", "DEVICES", "H100_80GB", "INFINIBAND_NDR", "NVLINK2", "NVLINK3", "NVLINK4",
    "NVLINK5", "PCIE3_X16", "PCIE4_X16", "PCIE5_X16", "SHARED_MEMORY", "SPECS", "Cluster",
    "Device", "GiB", "Link", "cpu_device", "device_for_name", "get_cluster", "get_device",
    "match_name",
    # workloads and traces
    "DTYPE_BYTES", "PRESETS", "SAVES", "Event", "Layer", "Trace", "Workload", "get_workload",
    "transformer",
    # compute and memory
    "CATEGORIES", "LOW_DTYPES", "OPTIMIZERS", "POLICIES", "POLICY_SOURCES", "PRECISIONS",
    "MemoryBreakdown", "PrecisionPolicy",
    "backward_time_s", "checkpointed_activation_bytes", "comm_overlaps_compute",
    "forward_time_s", "fsdp_padded_shard_numel", "fsdp_rank_bytes", "fsdp_shard_rows",
    "max_batch_size", "max_params_that_fit", "model_state_bytes", "optimizer_time_s",
    "policy_bytes_per_param", "policy_model_state_bytes", "precision_bytes_per_param",
    "precision_policy", "predict_single", "scheme_table", "step_compute_s",
    "zero1_optimizer_bytes", "zero1_partition", "zero_bytes_per_device",
    # the GIL
    "DEFAULT_SWITCH_INTERVAL_S", "GILConfig", "predict_speedup", "schedule", "simulate_gil",
    # collectives
    "ALGORITHMS", "COLLECTIVES", "GroupShape", "RankTraffic", "RingStep", "SizeSeries",
    "achieved_link", "algbw_GBps", "bandwidth_series", "bus_bandwidth_factor", "busbw_GBps",
    "bytes_received_per_rank", "bytes_sent_per_rank", "choose", "chunk_bounds",
    "collective_time_s", "cost_terms", "fit_link", "group_shape", "model_series",
    "nccl_time_s", "rank_traffic", "ring_all_reduce_steps",
    # strategies: one simulate and step_result for all; each one's own summary and extras
    "DDPConfig", "DPConfig", "FSDPConfig", "HSDPConfig", "SingleConfig", "StepResult",
    "get_strategy", "simulate", "step_result", "strategy_names",
    "dp_summary", "fsdp_summary", "single_summary",
    "DEFAULT_BUCKET_CAP_MB", "Bucket", "GradTensor", "MiB", "ScalingPoint", "buckets_of",
    "build_buckets", "first_bucket_cap_for", "grad_tensors", "scaling",
    "breakdown", "fit_rows",
    "bytes_at_loss", "device0_extra_bytes", "scatter_sizes", "with_output_features",
    "communication_bytes_per_step", "compare_stages", "hsdp_traffic", "traffic_of",
    # the planner
    "PLANNER_PRECISIONS", "PRECISION_SETTINGS", "POWERS_OF_TWO", "Crossover", "PlanResult",
    "beyond_data_parallel",
    "crossover", "efficiencies", "plan", "scaling_curve", "summary_table",
    # validation against published numbers
    "fidelity", "held_out_summary", "link_constants", "load_runs", "shipped_rows",
    # the checks, for the other wings' own boundaries
    "require_bool", "require_choice", "require_finite", "require_int", "require_range",
    "require_type",
]

# Every function of the face checks its arguments against its hints, except the require_*
# checks themselves (they are what a check calls).
for _name in __all__:
    if not _name.startswith("require_") and inspect.isfunction(globals()[_name]):
        globals()[_name] = checked(globals()[_name])
