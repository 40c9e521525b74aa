"""Bad input to the strategies and the planner: a ValueError that names the field.

Each table row is one bad call and the field its message must start with, as the caller
wrote it. Functions are called at the face (`dpsim.sim`), where arguments are checked;
inside, typed inputs are trusted. Accepted extremes never give NaN, infinite or negative
seconds and bytes, and the calls that used to hang or crash (DP with a huge host cost per
operator) return.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

import dpsim.sim as sim
from dpsim.sim.hardware import NVLINK4, Cluster, Link, get_cluster
from dpsim.sim.limits import MAX_HOST_US
from dpsim.sim.strategies import ddp, dp, fsdp, single
from dpsim.sim.strategies.base import CrossoverTerms, Placement, StepResult
from dpsim.sim.strategies.crossover import crossover_formula
from dpsim.sim.strategies.ddp import DDPConfig, GradTensor
from dpsim.sim.strategies.dp import DPConfig
from dpsim.sim.strategies.fsdp import FSDPConfig
from dpsim.sim.strategies.fsdp.hsdp import HSDPConfig
from dpsim.sim.strategies.registry import get_strategy, names
from dpsim.sim.strategies.single import SingleConfig
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Layer, Workload, get_workload
from tests.support.bad_input import raises_naming

W = get_workload("gpt2-124m")
NODE = get_cluster("h100-node")
DEV = NODE.device
NAN, INF = float("nan"), float("inf")


def _layer(**changes: Any) -> Workload:
    """gpt2 with its first layer changed (a Layer does not check its own fields)."""
    first = dataclasses.replace(W.layers[0], **changes)
    return dataclasses.replace(W, layers=(first, *W.layers[1:]))


NO_WORK = Workload("idle", (Layer("id", "Identity", 0, 0, 0, 0, 0.0),))
NO_PARAMS = Workload("act", (Layer("relu", "ReLU", 0, 0, 4, 4, 1.0),))


@cache
def _trace(name: str) -> Trace:
    """One small simulated trace per strategy module."""
    if name == "single":
        return single.simulate(W, DEV, SingleConfig(batch_size=2))
    if name == "dp":
        return dp.simulate(W, NODE, DPConfig(n_devices=2, batch_size=4))
    if name == "ddp":
        return ddp.simulate(W, NODE.with_devices(2), DDPConfig(batch_size=2))
    return fsdp.simulate(W, NODE.with_devices(2), FSDPConfig(batch_size=2))


def _single(**changes: Any) -> Callable[[], object]:
    """A single-device step of gpt2 with its first layer changed."""
    return lambda: sim.simulate(_layer(**changes), DEV, SingleConfig())


def _raises(call: Callable[[], object], field: str) -> None:
    with raises_naming(field) as info:
        call()
    assert len(str(info.value)) < 600  # a message, not a dump of the whole object


# --- config dataclasses: field=value for each bad value ------------------------------------

CONFIGS: list[tuple[type, str, object]] = [
    (SingleConfig, "batch_size", True), (SingleConfig, "batch_size", 2.0),
    (SingleConfig, "batch_size", 0), (SingleConfig, "batch_size", 1 << 25),
    (SingleConfig, "optimizer", "lion"), (SingleConfig, "dtype", "fp64"),
    (SingleConfig, "mixed_precision", 1), (SingleConfig, "mixed_precision", "yes"),
    (DPConfig, "n_devices", True), (DPConfig, "n_devices", 0), (DPConfig, "n_devices", 1025),
    (DPConfig, "batch_size", -1), (DPConfig, "input_on", "disk"),
    (DPConfig, "python_op_us", NAN), (DPConfig, "python_op_us", INF),
    (DPConfig, "python_op_us", -1.0), (DPConfig, "python_op_us", 1e9),
    (DPConfig, "python_op_us", "5"), (DPConfig, "op_gil_share", NAN),
    (DPConfig, "op_gil_share", 1.5), (DPConfig, "op_gil_share", True),
    (DPConfig, "replicate_us_per_module", INF), (DPConfig, "replicate_us_per_module", 1e9),
    (DPConfig, "thread_start_us", 1e9), (DPConfig, "thread_start_us", -1.0),
    (DDPConfig, "batch_size", True), (DDPConfig, "bucket_cap_mb", 0.0),
    (DDPConfig, "bucket_cap_mb", NAN), (DDPConfig, "bucket_cap_mb", INF),
    (DDPConfig, "bucket_cap_mb", "25"), (DDPConfig, "first_bucket_cap_mb", -1.0),
    (DDPConfig, "overlap", 1), (DDPConfig, "algorithm", "star"),
    (DDPConfig, "gradient_as_bucket_view", "no"), (DDPConfig, "mixed_precision", 0),
    (FSDPConfig, "stage", True), (FSDPConfig, "stage", False), (FSDPConfig, "stage", 4),
    (FSDPConfig, "stage", -1), (FSDPConfig, "stage", 3.0), (FSDPConfig, "precision", "fp8"),
    (FSDPConfig, "batch_size", 0), (FSDPConfig, "layers_per_unit", True),
    (FSDPConfig, "layers_per_unit", 0), (FSDPConfig, "forward_prefetch", 1),
    (FSDPConfig, "algorithm", "star"),
]


@pytest.mark.parametrize(("cls", "field", "value"), CONFIGS,
                         ids=[f"{c.__name__}.{f}={v!r}" for c, f, v in CONFIGS])
def test_config_names_the_bad_field(cls: type, field: str, value: object) -> None:
    _raises(lambda: cls(**{field: value}), field)


def test_the_host_cost_bound_is_in_the_message() -> None:
    with pytest.raises(ValueError, match=r"^python_op_us=1000000000.0 is out of range; "
                                         r"allowed >= 0 and <= 10000.0$"):
        DPConfig(python_op_us=1e9)


GOOD_STEP = {"step_s": 1.0, "compute_s": 1.0, "hidden_comm_s": 0.0, "exposed_comm_s": 0.0,
             "other_s": 0.0, "peak_bytes": (1,), "sent_bytes_per_device": 0,
             "batch_per_device": 1, "n_devices": 1}
GOOD_LAYER = {"name": "l", "kind": "Linear", "n_params": 1, "n_param_tensors": 1,
              "activation_bytes": 0, "output_bytes": 0, "flops": 1.0}
RESULTS: list[tuple[Callable[..., object], dict[str, object], str, object]] = [
    (StepResult, GOOD_STEP, "step_s", INF), (StepResult, GOOD_STEP, "compute_s", NAN),
    (StepResult, GOOD_STEP, "other_s", -1.0), (StepResult, GOOD_STEP, "peak_bytes", [1]),
    (StepResult, GOOD_STEP, "peak_bytes", (-1,)), (StepResult, GOOD_STEP, "peak_bytes", (1.5,)),
    (StepResult, GOOD_STEP, "n_devices", True),
    (Placement, {"replicated": "", "sharded": "", "use_when": ""}, "sharded", None),
    (CrossoverTerms, {"model_transfers": 2.0, "alpha_terms": 2, "forward_covered": False},
     "model_transfers", 0.0),
    (CrossoverTerms, {"model_transfers": 2.0, "alpha_terms": 2, "forward_covered": False},
     "model_transfers", NAN),
    (CrossoverTerms, {"model_transfers": 2.0, "alpha_terms": 2, "forward_covered": False},
     "alpha_terms", True),
    (CrossoverTerms, {"model_transfers": 2.0, "alpha_terms": 2, "forward_covered": False},
     "forward_covered", 1),
    (GradTensor, {"name": "w", "nbytes": 4}, "name", 1),
    (GradTensor, {"name": "w", "nbytes": 4}, "nbytes", -1),
    (GradTensor, {"name": "w", "nbytes": 4}, "nbytes", 1.5),
    (GradTensor, {"name": "w", "nbytes": 4}, "layer", True),
    # an FSDP Unit's numbers are summed from the Layers build_units is given: checked there
    (Layer, GOOD_LAYER, "n_params", -1), (Layer, GOOD_LAYER, "flops", NAN),
    (Layer, GOOD_LAYER, "flops", -1.0),
    (fsdp.FSDPStrategy, {"stage": 3, "name": "z", "label": "z",
                         "placement": fsdp.ZERO3.placement}, "stage", True),
    (fsdp.FSDPStrategy, {"stage": 3, "name": "z", "label": "z",
                         "placement": fsdp.ZERO3.placement}, "name", ""),
    (fsdp.FSDPStrategy, {"stage": 3, "name": "z", "label": "z",
                         "placement": fsdp.ZERO3.placement}, "placement", "nothing"),
]


@pytest.mark.parametrize(("cls", "good", "field", "value"), RESULTS,
                         ids=[f"{c.__name__}.{f}={v!r}" for c, _, f, v in RESULTS])
def test_other_dataclasses_name_the_bad_field(cls: Callable[..., object],
                                              good: dict[str, object], field: str,
                                              value: object) -> None:
    cls(**good)
    _raises(lambda: cls(**{**good, field: value}), field)


# --- functions of the face: each bad call and the argument it names -----------------------

T = [GradTensor("a", 4, 0), GradTensor("b", 4, 1)]
STRATEGY_CALLS: list[tuple[str, Callable[[], object], str]] = [
    ("simulate str", lambda: sim.simulate("gpt2", DEV, SingleConfig()), "workload"),  # type: ignore[arg-type]
    ("simulate single on a cluster", lambda: sim.simulate(W, NODE, SingleConfig()), "hardware"),
    ("simulate config", lambda: sim.simulate(W, DEV, "cfg"), "config"),  # type: ignore[arg-type]
    # a bad Layer or Workload is refused where it is built, naming the dataclass field
    ("simulate nan flops", _single(flops=NAN), "flops"),
    ("simulate inf flops", _single(flops=INF), "flops"),
    ("simulate huge flops", _single(flops=1e300), "flops"),
    ("simulate neg params", _single(n_params=-1), "n_params"),
    ("simulate float bytes", _single(output_bytes=1.5), "output_bytes"),
    ("simulate bool tensors", _single(n_param_tensors=True), "n_param_tensors"),
    ("simulate no work", lambda: sim.simulate(NO_WORK, DEV, SingleConfig()), "workload"),
    ("simulate layers", lambda: sim.simulate(
        dataclasses.replace(W, layers=("x",)),  # type: ignore[arg-type]
        DEV, SingleConfig()), "layers[0]"),
    ("simulate dtype", lambda: sim.simulate(
        dataclasses.replace(W, dtype="fp8"), DEV, SingleConfig()), "dtype"),
    ("simulate loss", lambda: sim.simulate(
        dataclasses.replace(W, loss_bytes=-8), DEV, SingleConfig()), "loss_bytes"),
    ("simulate dp on a device", lambda: sim.simulate(W, DEV, DPConfig()), "hardware"),
    ("simulate dp n", lambda: sim.simulate(W, NODE, DPConfig(n_devices=9)), "n_devices"),
    ("simulate dp host cost", lambda: sim.simulate(W, dataclasses.replace(NODE, device=(
        dataclasses.replace(DEV, op_overhead_us=20_000.0))), DPConfig()),
     "hardware.device.op_overhead_us"),
    ("simulate ddp workload", lambda: sim.simulate("w", NODE, DDPConfig()), "workload"),  # type: ignore[arg-type]
    ("simulate ddp on a device", lambda: sim.simulate(W, DEV, DDPConfig()), "hardware"),
    ("simulate ddp layer", lambda: sim.simulate(W, NODE, DDPConfig(),
                                                tensors=[GradTensor("x", 4, 99)]),
     "tensors[0].layer"),
    ("simulate ddp tensors", lambda: sim.simulate(W, NODE, DDPConfig(), tensors=["x"]),  # type: ignore[list-item]
     "tensors[0]"),
    ("simulate ddp order", lambda: sim.simulate(W, NODE, DDPConfig(), ready_order=["x"]),
     "ready_order"),
    ("simulate fsdp cluster", lambda: sim.simulate(W, "node", FSDPConfig()), "hardware"),  # type: ignore[arg-type]
    ("simulate fsdp workload", lambda: sim.simulate(NO_WORK, NODE, FSDPConfig()), "workload"),
    ("simulate hsdp shard", lambda: sim.simulate(W, NODE, HSDPConfig(shard_size=3)),
     "shard_size"),
    ("breakdown", lambda: sim.breakdown(_trace("ddp")), "trace"),
    ("single_summary", lambda: sim.single_summary("trace"), "trace"),  # type: ignore[arg-type]
    ("fit_rows str", lambda: sim.fit_rows("gpt2-124m", DEV), "models"),
    ("fit_rows name", lambda: sim.fit_rows(["gpt"], DEV), "models[0]"),
    ("fit_rows batch", lambda: sim.fit_rows(["gpt2-124m"], DEV, 0), "batch_size"),
    ("fit_rows device", lambda: sim.fit_rows(["gpt2-124m"], NODE), "device"),  # type: ignore[arg-type]
    ("scatter_sizes bool", lambda: sim.scatter_sizes(True, 4), "batch_size"),
    ("scatter_sizes float", lambda: sim.scatter_sizes(8, 2.0), "n_devices"),  # type: ignore[arg-type]
    ("with_output_features", lambda: sim.with_output_features("w", 10), "workload"),  # type: ignore[arg-type]
    ("with_output_features n", lambda: sim.with_output_features(W, 1 << 40), "out_features"),
    ("with_output_features bool", lambda: sim.with_output_features(W, True), "out_features"),
    ("bytes_at_loss config", lambda: sim.bytes_at_loss(W, DDPConfig()), "config"),  # type: ignore[arg-type]
    ("bytes_at_loss workload", lambda: sim.bytes_at_loss("w", DPConfig()), "workload"),  # type: ignore[arg-type]
    ("device0_extra_bytes", lambda: sim.device0_extra_bytes(W, "cfg"), "config"),  # type: ignore[arg-type]
    ("device0_extra_bytes one", lambda: sim.device0_extra_bytes(W, DPConfig(n_devices=1)),
     "n_devices"),
    ("dp_summary", lambda: sim.dp_summary(_trace("single")), "trace"),
    ("step_result empty", lambda: sim.step_result(Trace()), "trace"),
    ("step_result trace", lambda: sim.step_result("x"), "trace"),  # type: ignore[arg-type]
    ("step_result none", lambda: sim.step_result(None), "trace"),  # type: ignore[arg-type]
    ("step_result device", lambda: sim.step_result(_trace("ddp"), -1), "device"),
    ("step_result bool", lambda: sim.step_result(_trace("ddp"), True), "device"),
    ("step_result missing device", lambda: sim.step_result(_trace("ddp"), 3), "device"),
    ("build_buckets ints", lambda: sim.build_buckets([1, 2]), "tensors[0]"),  # type: ignore[list-item]
    ("build_buckets str", lambda: sim.build_buckets("ab"), "tensors"),  # type: ignore[arg-type]
    ("build_buckets cap", lambda: sim.build_buckets(T, INF), "bucket_cap_mb"),
    ("build_buckets first", lambda: sim.build_buckets(T, 25.0, NAN), "first_bucket_cap_mb"),
    ("build_buckets order", lambda: sim.build_buckets(T, ready_order=[1, 2]),  # type: ignore[list-item]
     "ready_order[0]"),
    ("build_buckets order str", lambda: sim.build_buckets(T, ready_order="ab"), "ready_order"),
    ("build_buckets order names", lambda: sim.build_buckets(T, ready_order=["a", "c"]),
     "ready_order"),
    ("first_bucket_cap_for", lambda: sim.first_bucket_cap_for(0.0), "bucket_cap_mb"),
    ("grad_tensors dtype", lambda: sim.grad_tensors(W, "fp64"), "dtype"),
    ("grad_tensors workload", lambda: sim.grad_tensors("w"), "workload"),  # type: ignore[arg-type]
    ("grad_tensors pair", lambda: sim.grad_tensors(W, names=[("a",)]), "names[0]"),  # type: ignore[list-item]
    ("grad_tensors nbytes", lambda: sim.grad_tensors(W, names=[("a", -1)]), "names[0][1]"),
    ("grad_tensors names", lambda: sim.grad_tensors(W, names="ab"), "names"),  # type: ignore[arg-type]
    ("buckets_of", lambda: sim.buckets_of(_trace("fsdp")), "trace"),
    ("scaling zero", lambda: sim.scaling(W, NODE, world_sizes=[0]), "world_sizes[0]"),
    ("scaling int", lambda: sim.scaling(W, NODE, world_sizes=4), "world_sizes"),  # type: ignore[arg-type]
    ("scaling bool", lambda: sim.scaling(W, NODE, world_sizes=[True]), "world_sizes[0]"),
    ("scaling nodes", lambda: sim.scaling(W, NODE, world_sizes=[4, 12]), "world_sizes[1]"),
    ("scaling cluster", lambda: sim.scaling(W, "node"), "cluster"),  # type: ignore[arg-type]
    ("scaling workload", lambda: sim.scaling(NO_WORK, NODE), "workload"),
    ("comm stage", lambda: sim.communication_bytes_per_step(1, 2, True), "stage"),
    ("comm width", lambda: sim.communication_bytes_per_step(1, 2, 3, 0), "bytes_per_param"),
    ("comm width neg", lambda: sim.communication_bytes_per_step(1, 2, 3, -2),
     "bytes_per_param"),
    ("comm reshard", lambda: sim.communication_bytes_per_step(1, 2, 3, 2, 1),  # type: ignore[arg-type]
     "reshard_after_forward"),
    ("comm n_params", lambda: sim.communication_bytes_per_step(-1, 2, 3), "n_params"),
    ("comm world", lambda: sim.communication_bytes_per_step(1, 0, 3), "world_size"),
    ("fsdp_summary", lambda: sim.fsdp_summary(_trace("dp")), "trace"),
    ("compare_stages bool", lambda: sim.compare_stages(W, NODE, FSDPConfig(), stages=(True,)),
     "stages[0]"),
    ("compare_stages int", lambda: sim.compare_stages(W, NODE, FSDPConfig(), 3),  # type: ignore[arg-type]
     "stages"),
    ("compare_stages config", lambda: sim.compare_stages(W, NODE, DDPConfig()),  # type: ignore[arg-type]
     "config"),
    ("compare_stages workload", lambda: sim.compare_stages(NO_WORK, NODE, FSDPConfig()),
     "workload"),
    ("hsdp_traffic shard", lambda: sim.hsdp_traffic(10, 8, 3), "shard_size"),
    ("traffic_of", lambda: sim.traffic_of(_trace("ddp")), "trace"),
    ("get_strategy", lambda: sim.get_strategy("tp"), "name"),
    ("get_strategy list", lambda: sim.get_strategy(["ddp"]), "name"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "field"), [(c, f) for _, c, f in STRATEGY_CALLS],
                         ids=[i for i, _, _ in STRATEGY_CALLS])
def test_strategy_functions_name_the_bad_argument(call: Callable[[], object],
                                                  field: str) -> None:
    _raises(call, field)


C = crossover_formula
PLANNER_CALLS: list[tuple[str, Callable[[], object], str]] = [
    ("plan workload", lambda: sim.plan("gpt2", NODE, "ddp", 8, 64), "workload"),  # type: ignore[arg-type]
    ("plan cluster", lambda: sim.plan(W, DEV, "ddp", 8, 64), "cluster"),  # type: ignore[arg-type]
    ("plan strategy", lambda: sim.plan(W, NODE, 5, 8, 64), "strategy"),  # type: ignore[arg-type]
    ("plan n bool", lambda: sim.plan(W, NODE, "ddp", True, 8), "n_devices"),
    ("plan batch float", lambda: sim.plan(W, NODE, "ddp", 8, 64.0), "global_batch"),  # type: ignore[arg-type]
    ("plan batch negative", lambda: sim.plan(W, NODE, "ddp", 8, -64), "global_batch"),
    ("plan optimizer", lambda: sim.plan(W, NODE, "ddp", 8, 64, optimizer="lion"), "optimizer"),
    ("plan precision", lambda: sim.plan(W, NODE, "ddp", 8, 64, precision=None), "precision"),  # type: ignore[arg-type]
    ("plan nan flops", lambda: sim.plan(_layer(flops=NAN), NODE, "fsdp", 8, 64),
     "flops"),  # refused where the Layer is built
    ("scaling_curve negative", lambda: sim.scaling_curve(W, NODE, "ddp", -8), "batch"),
    ("scaling_curve bool", lambda: sim.scaling_curve(W, NODE, "ddp", True), "batch"),
    ("scaling_curve weak", lambda: sim.scaling_curve(W, NODE, "ddp", 1 << 20, mode="weak"),
     "batch"),
    ("scaling_curve counts int", lambda: sim.scaling_curve(W, NODE, "ddp", 8, n_devices=8),  # type: ignore[arg-type]
     "n_devices"),
    ("scaling_curve counts zero", lambda: sim.scaling_curve(W, NODE, "ddp", 8, n_devices=[0]),
     "n_devices[0]"),
    ("scaling_curve counts empty", lambda: sim.scaling_curve(W, NODE, "ddp", 8, n_devices=[]),
     "n_devices"),
    ("scaling_curve mode", lambda: sim.scaling_curve(W, NODE, "ddp", 8, mode="x"), "mode"),
    ("scaling_curve precision", lambda: sim.scaling_curve(W, NODE, "ddp", 8, precision="bf16"),
     "precision"),
    ("scaling_curve workload", lambda: sim.scaling_curve(None, NODE, "ddp", 8), "workload"),  # type: ignore[arg-type]
    ("efficiencies empty", lambda: sim.efficiencies([]), "curve"),
    ("efficiencies floats", lambda: sim.efficiencies([1.0]), "curve[0]"),  # type: ignore[list-item]
    # crossover_formula trusts its inputs; these refusals are the formula's own
    ("crossover_formula never", lambda: C(1e-3, 64, 2.0, 10**9, 0, NVLINK4, 10.0), "c0_s"),
    ("crossover_formula nothing", lambda: C(1e-3, 64, 2.0, 0, 0, NVLINK4), "model_bytes"),
    ("crossover_formula extreme link", lambda: C(1e-3, 64, 2.0, 10**9, 2,
                                                 Link("x", 100.0, 1e-300), 1e6), "link"),
    ("crossover batch", lambda: sim.crossover(W, NODE, "ddp", -64), "global_batch"),
    ("crossover splits none", lambda: sim.crossover(W, NODE, "ddp", 64, n_devices=[3, 5]),
     "global_batch"),
    ("crossover counts", lambda: sim.crossover(W, NODE, "ddp", 64, n_devices="12"),  # type: ignore[arg-type]
     "n_devices"),
    ("crossover no params", lambda: sim.crossover(NO_PARAMS, NODE, "ddp", 64), "workload"),
    ("crossover precision", lambda: sim.crossover(W, NODE, "ddp", 64, precision="bf16"),
     "precision"),
    ("crossover no latency", lambda: sim.crossover(W, Cluster("ideal", DEV, 8, 1, Link(
        "ideal", 1e12, 0.0)), "ddp", 1024), "cluster"),
    ("summary_table n", lambda: sim.summary_table(W, NODE, 0), "n_devices"),
    ("summary_table batch", lambda: sim.summary_table(W, NODE, 8, 0), "global_batch"),
    ("summary_table str", lambda: sim.summary_table(W, NODE, strategies="ddp"), "strategies"),
    ("summary_table name", lambda: sim.summary_table(W, NODE, strategies=["tp"]),
     "strategies[0]"),
    ("summary_table cluster", lambda: sim.summary_table(W, DEV), "cluster"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "field"), [(c, f) for _, c, f in PLANNER_CALLS],
                         ids=[i for i, _, _ in PLANNER_CALLS])
def test_planner_functions_name_the_bad_argument(call: Callable[[], object],
                                                 field: str) -> None:
    _raises(call, field)


# --- accepted extremes: finite, non-negative seconds and bytes ------------------------------


def _finite(result: object) -> None:
    for f in dataclasses.fields(result):  # type: ignore[arg-type]
        value = getattr(result, f.name)
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, int | float):
                assert math.isfinite(v), f.name
                assert v >= 0, f.name


@pytest.mark.parametrize("strategy", names())
@pytest.mark.parametrize("batch", ["smallest", "largest"])
def test_accepted_extremes_give_finite_results(strategy: str, batch: str) -> None:
    n = 1 if strategy == "single" else 8
    global_batch = n if batch == "smallest" else (1 << 24) // n * n
    p = sim.plan(W, NODE, strategy, n, global_batch, precision="fp32")
    _finite(p)
    assert p.step_s > 0
    assert math.isfinite(p.samples_per_s)


def test_crossover_formula_is_finite_and_never_negative() -> None:
    slow = Link("slow", 1e-3, 1e6)
    for args in [(0.0, 1, 1000.0, 1 << 53, 1 << 30, slow, 1e6),
                 (1e6, 1 << 24, 1e-9, 1, 1, NVLINK4, 0.0),
                 (0.0, 1, 2.0, 10**9, 2, NVLINK4, 0.0)]:
        n_star = crossover_formula(*args)
        assert math.isfinite(n_star)
        assert n_star >= 0
    assert crossover_formula(1e-3, 64, 2.0, 10**9, 0, Link("x", 100.0, 0.0)) == pytest.approx(
        1e-3 * 64 * 100e9 / 2e9)


# --- the calls that hung or crashed -----------------------------------------------------------


@pytest.mark.timeout(10)  # used to run for hours: the GIL model handed over every 5 ms
def test_a_huge_host_cost_is_refused_and_the_bound_simulates() -> None:
    with pytest.raises(ValueError, match="python_op_us"):
        dp.simulate(W, NODE, DPConfig(python_op_us=1e9))
    big = get_workload("llama-70b")
    trace = dp.simulate(big, NODE, DPConfig(n_devices=8, batch_size=64,
                                           python_op_us=MAX_HOST_US,
                                           thread_start_us=MAX_HOST_US,
                                           replicate_us_per_module=MAX_HOST_US))
    _finite(dp.step_result(trace))


def test_the_host_cost_per_operator_is_host_time_not_kernel_time() -> None:
    """python_op_us above the device's own overhead used to make kernels negative."""
    def kernels(op_us: float | None) -> list[float]:
        trace = dp.simulate(W, NODE, DPConfig(n_devices=2, batch_size=8, python_op_us=op_us))
        return [e.duration_s for e in trace.filter(kind="forward") if e.stream == "compute"]

    assert kernels(100.0) == pytest.approx(kernels(None))
    slow = dp.summary(dp.simulate(W, NODE, DPConfig(n_devices=2, batch_size=8,
                                                    python_op_us=100.0)))
    fast = dp.summary(dp.simulate(W, NODE, DPConfig(n_devices=2, batch_size=8)))
    assert slow.python_s > fast.python_s


def test_valid_calls_pass_the_checks() -> None:
    """The checks leave valid calls alone: the default table still covers every strategy."""
    rows = sim.summary_table(W, NODE)
    assert [r["devices"] for r in rows] == [1, 8, 8, 8, 8, 8, 8]
    assert sim.efficiencies(sim.scaling_curve(W, NODE, "ddp", 64, n_devices=[1, 2]))[0] == 1.0
    assert get_strategy("fsdp").crossover_terms(W, "bf16") == CrossoverTerms(
        3.0, 3 * len(W.layers), True, "all_gather")


def test_a_dp_step_too_large_to_simulate_names_n_devices() -> None:
    """The GIL model caps its cost; DP reports that against the caller's n_devices."""
    from dpsim.sim.hardware import get_cluster
    from dpsim.sim.workload import get_workload

    node = dataclasses.replace(get_cluster("h100-node"), devices_per_node=64)
    with pytest.raises(ValueError, match=r"^n_devices=64 with \d+ layers is too large"):
        dp.simulate(get_workload("llama-70b"), node, DPConfig(n_devices=64, batch_size=256))
