"""The public API of the simulator wing and the widgets, as a table of valid calls.

Each `EntryPoint` names a public function, config dataclass or method, the callable, and
one valid value per argument (`Arg`: name, value, kind). `then` runs on what a
constructor returns (a config -> its simulation), so that a value a config accepts is also
followed into the simulation. The fuzz (`benchmarks/fuzz_api.py`) perturbs one argument at
a time from these values; the property test (`tests/api/test_api_properties.py`) draws
arbitrary values for them. `discover()` lists what the modules export, so that a new public
function that is neither in the table nor in `SKIPPED` shows up in the fuzz's results.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

# Argument kinds: what the argument means, which decides how it is perturbed.
INT = "int"  # an integer count or size
FLOAT = "float"  # a real number (seconds, bytes per second, a share)
CHOICE = "choice"  # one of `choices` (names, or integers such as a ZeRO stage)
BOOL = "bool"  # True or False
NAME = "name"  # free text (a label): any string is valid
OBJECT = "object"  # a dpsim object (Workload, Cluster, Link, a config, a Trace)
INTS = "ints"  # a sequence of integers
FLOATS = "floats"  # a sequence of real numbers
CHOICES = "choices"  # a sequence of `choices`
OBJECTS = "objects"  # a sequence of dpsim objects
SHAPE = "shape"  # a tensor shape: a tuple of non-negative integers
SHAPES = "shapes"  # a sequence of shapes
DATA = "data"  # structured data (nested lists, dicts); perturbed by `extra` only
KINDS = (INT, FLOAT, CHOICE, BOOL, NAME, OBJECT, INTS, FLOATS, CHOICES, OBJECTS, SHAPE,
         SHAPES, DATA)

SIMULATOR_MODULES = (
    "dpsim.sim.hardware", "dpsim.sim.workload", "dpsim.sim.trace", "dpsim.sim.cost.memory",
    "dpsim.sim.cost.fsdp_shards",
    "dpsim.sim.cost.compute", "dpsim.sim.cost.gil", "dpsim.sim.cost.gil_limits",
    "dpsim.sim.collectives.cost",
    "dpsim.sim.collectives.ring",
    "dpsim.sim.collectives.schedule", "dpsim.sim.collectives.fit", "dpsim.sim.collectives.series",
    "dpsim.sim.strategies.base", "dpsim.sim.strategies.single",
    "dpsim.sim.strategies.dp", "dpsim.sim.strategies.ddp", "dpsim.sim.strategies.fsdp",
    "dpsim.sim.strategies.registry", "dpsim.sim.planner",
    "dpsim.sim.collectives.nccl", "dpsim.sim.hardware.gpu_specs", "dpsim.sim.fidelity.collectives",
    "dpsim.sim.fidelity.memory", "dpsim.sim.fidelity.report", "dpsim.sim.fidelity.ddp",
    "dpsim.sim.cost.precision", "dpsim.sim.cost.zero_partition", "dpsim.sim.strategies.knobs",
    "dpsim.sim.strategies.fsdp.hsdp", "dpsim.sim.fidelity.resnet_scaling",
    "dpsim.sim.fidelity.zero_paper",
    "dpsim.sim.fidelity.input_pipeline", "dpsim.sim.fidelity.resnet_scaling_report",
    "dpsim.sim.fidelity.fsdp_scale", "dpsim.sim.fidelity.fsdp_scale_report",
    "dpsim.sim.fidelity.fsdp_width",
    "dpsim.sim.collectives.group_cost",
    "dpsim.sim.cost.compute_contention",
    "dpsim.sim.collectives.protocols", "dpsim.sim.collectives.params",
    "dpsim.sim.fidelity.constants_block", "dpsim.sim.fidelity.leave_run_out",
)
WIDGET_MODULES = (
    "dpsim.widgets.memory_explorer", "dpsim.widgets.collectives_explorer",
    "dpsim.widgets.ddp_explorer", "dpsim.widgets.dp_explorer",
    "dpsim.widgets.strategy_dashboard", "dpsim.widgets.zero_explorer",
    "dpsim.widgets.dashboard",
)

_RESULT = "a result record the simulator builds; callers read it, they do not construct it"
_BUILDER = "builds ipywidgets controls; its explore/render function is in the table"
_STRATEGY = "a strategy object; plan, scaling_curve and summary_table call every member"
# Discovered names that are deliberately not fuzzed, and why.
SKIPPED: dict[str, str] = {
    "dpsim.sim.cost.gil.GILResult": _RESULT, "dpsim.sim.planner.PlanResult": _RESULT,
    "dpsim.sim.planner.Crossover": _RESULT, "dpsim.sim.cost.memory.MemoryBreakdown": _RESULT,
    "dpsim.sim.collectives.series.RankTraffic": _RESULT,
    "dpsim.sim.collectives.series.SizeSeries": _RESULT,
    "dpsim.sim.collectives.ring.RingStep": _RESULT, "dpsim.sim.collectives.ring.RingSend": _RESULT,
    "dpsim.sim.collectives.schedule.Round": _RESULT, "dpsim.sim.strategies.ddp.Bucket": _RESULT,

    "dpsim.sim.strategies.ddp.ScalingPoint": _RESULT,
    "dpsim.sim.strategies.fsdp.Unit": _RESULT,
    "dpsim.sim.strategies.dp.DPSummary": _RESULT, "dpsim.sim.strategies.fsdp.FSDPSummary": _RESULT,
    "dpsim.sim.strategies.single.SingleSummary": _RESULT,

    "dpsim.sim.strategies.base.Placement": _RESULT,
    "dpsim.sim.strategies.base.CrossoverTerms": _RESULT,
    "dpsim.widgets.collectives_explorer.Estimate": _RESULT,
    "dpsim.widgets.collectives_explorer.Preset": _RESULT,
    "dpsim.sim.strategies.base.Strategy": "the base class: the registry checks subclasses",
    "dpsim.sim.trace.SimState": "the base of a simulator's typed state; simulate builds it",
    "dpsim.sim.strategies.dp.DPState": _RESULT, "dpsim.sim.strategies.ddp.DDPState": _RESULT,
    "dpsim.sim.strategies.fsdp.FSDPState": _RESULT,
    "dpsim.sim.strategies.fsdp.hsdp.HSDPState": _RESULT,
    "dpsim.sim.strategies.single.SingleState": _RESULT,
    "dpsim.sim.strategies.fsdp.FSDPStep": "the event loop fsdp.simulate runs; fuzzed through it",
    "dpsim.sim.strategies.fsdp.hsdp.HSDPStep": "the event loop hsdp.simulate runs; fuzzed "
                                               "through it",
    "dpsim.sim.collectives.nccl.ModelParams": "the model's constants, built by the fitter; "
                                          "every field is a number the fit sets",
    "dpsim.sim.collectives.params.ModelParams": "the model's constants, built by the fitter; "
                                            "every field is a number the fit sets",
    "dpsim.sim.collectives.nccl.bottleneck": "which link of a checked cluster and group pays the "
                                         "fill term; fuzzed through nccl_time_s",
    "dpsim.sim.hardware.gpu_specs.GpuSpec": "datasheet rows, read by hardware at import",
    **{f"dpsim.sim.fidelity.{name}": "the validation harness over the shipped dataset; run by "
                                 "python -m dpsim validate and tests/sim/test_fidelity.py"
       for name in ("collectives.Point", "collectives.load_runs", "collectives.points",
                    "collectives.cluster_of", "collectives.predict_us", "collectives.errors",
                    "collectives.link_names", "collectives.fill_links", "collectives.fit",
                    "collectives.data_files", "constants_block.block", "constants_block.write",
                    "collectives.link_of", "leave_run_out.predict_left_out",
                    "leave_run_out.evaluate",
                    "collectives.forced", "collectives.run_predictions",
                    "collectives.dpsim_nbytes",
                    "collectives.fitted_constants", "collectives.family",
                    "collectives.family_summary",
                    "collectives.evaluate", "collectives.shipped_rows",
                    "collectives.held_out_summary", "memory.evaluate", "ddp.evaluate",
                    "ddp.fit_efficiency", "report.shipped_matches_fit",
                    "report.run", "report.figure", "report.markdown", "report.main",
                    "report.scaling_and_zero_families", "resnet_scaling.load",
                    "resnet_scaling.device_of", "resnet_scaling.compute_dtype",
                    "resnet_scaling.fit_efficiency", "resnet_scaling.cluster_of",
                    "resnet_scaling.ddp_step_s", "resnet_scaling.evaluate",
                    "resnet_scaling.family", "resnet_scaling_report.section",
                    "input_pipeline.expected_max_normal", "input_pipeline.wait_term",
                    "input_pipeline.fit", "input_pipeline.worst_error", "input_pipeline.apply",
                    "input_pipeline.leave_one_table_out", "input_pipeline.variants",
                    "zero_paper.load",
                    "zero_paper.printed", "zero_paper.errors", "zero_paper.table1_rows",
                    "zero_paper.bold_agrees", "zero_paper.table2_rows", "zero_paper.evaluate",
                    "zero_paper.family", "zero_paper.section")},
    **{f"dpsim.sim.fidelity.{name}": "the FSDP/ZeRO-3 throughput validation over its shipped "
                                 "dataset; run by python -m dpsim validate and "
                                 "tests/sim/test_fidelity_fsdp_scale.py"
       for name in ("fsdp_scale.load", "fsdp_scale.workload", "fsdp_scale.cluster",
                    "fsdp_scale.settings", "fsdp_scale.step", "fsdp_scale.metric",
                    "fsdp_scale.implied_efficiency", "fsdp_scale.fit_point",
                    "fsdp_scale.varies", "fsdp_scale.evaluate", "fsdp_scale_report.family",
                    "fsdp_scale.width_factor", "fsdp_scale.width_train",
                    "fsdp_scale.fit_kappa", "fsdp_width.h0", "fsdp_width.factor",
                    "fsdp_width.elementwise_bytes", "fsdp_width.bytes_ratio",
                    "fsdp_scale_report.build",
                    "fsdp_scale_report.why", "fsdp_scale_report.summary_row",
                    "fsdp_scale_report.markdown", "fsdp_scale_report.console")},
    **{f"dpsim.sim.collectives.protocols.{name}": "NCCL's protocol tables, read by "
                                              "nccl.time_terms after it checks its arguments; "
                                              "fuzzed through it"
       for name in ("protocols_for", "bandwidth_factor", "nccl_latency_us",
                    "tree_correction")},
    "dpsim.sim.strategies.single.SingleStrategy": _STRATEGY,

    "dpsim.sim.strategies.dp.DPStrategy": _STRATEGY,
    "dpsim.sim.strategies.ddp.DDPStrategy": _STRATEGY,
    "dpsim.sim.strategies.fsdp.FSDPStrategy": _STRATEGY,
    "dpsim.sim.strategies.fsdp.hsdp.HSDPStrategy": _STRATEGY,
    "dpsim.sim.strategies.fsdp.hsdp.HSDPTraffic": _RESULT,
    "dpsim.sim.cost.gil_limits.simulation_steps":
        "the cost estimate simulate and schedule check "
        "first; fuzzed through them",

    "dpsim.sim.cost.gil_limits.check_steps":
        "the cost check simulate and schedule run first; fuzzed "
        "through them",
    "dpsim.sim.cost.gil_limits.check_threads": "the check schedule runs first; fuzzed through it",
    "dpsim.sim.collectives.ring.chunk_sizes": "the sizes behind chunk_bounds; fuzzed through it",
    "dpsim.widgets.dp_explorer.check_setting": "the check explore and render run first; "
                                               "fuzzed through them",
    "dpsim.widgets.strategy_dashboard.check_model": "the check StrategyExplorer.render runs "
                                                    "first; fuzzed through it",
    "dpsim.widgets.strategy_dashboard.model_choices": "lists the dashboard's model names",
    "dpsim.widgets.strategy_dashboard.own_workload": "runs a learner's torch module; the "
                                                     "simulator's fuzz starts no torch model",
    "dpsim.sim.strategies.registry.register": "changes the registry every later call reads",
    "dpsim.sim.strategies.registry.unregister": "changes the registry every later call reads",
    "dpsim.widgets.memory_explorer.memory_explorer": _BUILDER,
    "dpsim.widgets.collectives_explorer.collectives_explorer": _BUILDER,
    "dpsim.widgets.ddp_explorer.ddp_explorer": _BUILDER,
    "dpsim.widgets.dp_explorer.dp_explorer": _BUILDER,
    "dpsim.widgets.strategy_dashboard.strategy_dashboard": _BUILDER,
    "dpsim.widgets.zero_explorer.zero_explorer": _BUILDER,
    "dpsim.widgets.dashboard.dashboard": _BUILDER,
}


@dataclass(frozen=True)
class Arg:
    """One argument of a valid call: its name as the caller writes it and a valid value."""

    name: str
    value: Any
    kind: str
    choices: tuple[Any, ...] = ()  # CHOICE / CHOICES: every allowed value
    optional: bool = False  # None is a valid value
    extra: tuple[tuple[str, Any], ...] = ()  # (label, invalid value) particular to this one


@dataclass(frozen=True)
class EntryPoint:
    """A public callable and a valid call of it (every argument passed by keyword)."""

    name: str  # "hardware.Device", "planner.plan", "widgets.dp_explorer.render", ...
    fn: Callable[..., Any]
    args: tuple[Arg, ...] = ()
    then: Callable[[Any], Any] | None = None  # run on the result (a config -> its simulation)
    skip: frozenset[str] = field(default_factory=frozenset)  # result fields of caller data
    errors_as_text: str = ""  # a returned first line with this prefix reports a ValueError
    text: bool = False  # also look for nan, inf, negative numbers in returned strings

    def call(self, **overrides: Any) -> Any:
        """Call with the valid arguments, `overrides` replacing some; then `then`."""
        kwargs = {a.name: a.value for a in self.args} | overrides
        result = self.fn(**kwargs)
        return result if self.then is None else (result, self.then(result))

    def arg(self, name: str) -> Arg:
        """The argument called `name`."""
        return next(a for a in self.args if a.name == name)


def discover(modules: tuple[str, ...] = SIMULATOR_MODULES + WIDGET_MODULES) -> list[str]:
    """Public functions and classes each module defines, or a package's `__all__` names
    from its own modules ("dpsim.sim.cost.memory.model_state_bytes")."""
    found = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        exported = getattr(module, "__all__", None)
        for name, obj in vars(module).items():
            home = getattr(obj, "__module__", None) or ""
            if name.startswith("_") or not (home == module_name or (
                    exported is not None and name in exported
                    and home.startswith(f"{module_name}."))):
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found.append(f"{module_name}.{name}")
    return found


def integer(name: str, value: Any, **kw: Any) -> Arg:
    """An INT argument."""
    return Arg(name, value, INT, **kw)


def real(name: str, value: Any, **kw: Any) -> Arg:
    """A FLOAT argument."""
    return Arg(name, value, FLOAT, **kw)


def choice(name: str, value: Any, choices: Any, **kw: Any) -> Arg:
    """A CHOICE argument: one of `choices`."""
    return Arg(name, value, CHOICE, tuple(choices), **kw)


def flag(name: str, value: bool) -> Arg:
    """A BOOL argument."""
    return Arg(name, value, BOOL)


def obj(name: str, value: Any, **kw: Any) -> Arg:
    """An OBJECT argument."""
    return Arg(name, value, OBJECT, **kw)


def label(name: str, value: str) -> Arg:
    """A NAME argument: free text."""
    return Arg(name, value, NAME)


def covers(entry_name: str, discovered: str) -> bool:
    """True when the entry point "memory.model_state_bytes" (or a method "hardware.Cluster.
    link_for") covers the discovered name "dpsim.sim.cost.memory.model_state_bytes"
    ("...Cluster")."""
    head, _, rest = entry_name.partition(".")
    full = f"{MODULES.get(head, 'dpsim.' + head)}.{rest}"
    return full == discovered or full.startswith(f"{discovered}.")


# The table's short module names -> their dotted modules in the package.
MODULES = {
    **{m: f"dpsim.sim.{m}" for m in ("validation", "trace", "workload", "planner", "hardware",
                                    "collectives", "strategies", "fidelity")},
    **{m: f"dpsim.sim.cost.{m}" for m in ("compute", "compute_contention", "memory", "precision",
                                         "zero_partition", "fsdp_shards", "gil", "gil_limits")},
    "gpu_specs": "dpsim.sim.hardware.gpu_specs",
    "cluster_presets": "dpsim.sim.hardware.presets",
}


@cache
def entry_points(widgets: bool = True) -> tuple[EntryPoint, ...]:
    """Every entry point of the simulator wing (and of the widgets), in module order."""
    from benchmarks.api_table import simulator_entry_points

    out = simulator_entry_points()
    if widgets:
        from benchmarks.api_table_widgets import widget_entry_points

        out += widget_entry_points()
    return out


def entry_point(name: str) -> EntryPoint:
    """The simulator entry point called `name` (e.g. "planner.plan")."""
    for entry in entry_points(widgets=False):
        if entry.name == name:
            return entry
    raise ValueError(f"name={name!r} is not an entry point; allowed: "
                     f"{', '.join(e.name for e in entry_points(widgets=False))}")
