"""Valid calls of the widgets' explore and render functions (and their public helpers).

Dashboard builders (which create ipywidgets controls) are left out: `api_surface.SKIPPED`.
Every returned sentence is also searched for nan, inf and negative numbers (`text=True`).
"""

from __future__ import annotations

import math
from typing import Any

from benchmarks.api_surface import DATA, Arg, EntryPoint, choice, flag, integer, real
from dpsim.sim.collectives.cost import ALGORITHMS, COLLECTIVES
from dpsim.sim.cost.memory import OPTIMIZERS, PRECISIONS
from dpsim.sim.hardware import CLUSTERS, DEVICES
from dpsim.sim.strategies.registry import names
from dpsim.sim.workload import PRESETS


def _render(**kw: Any) -> Any:
    """A dashboard update on a fresh StrategyExplorer (nothing cached from earlier calls)."""
    from dpsim.widgets.strategy_dashboard import StrategyExplorer

    return StrategyExplorer().render(**kw)


def _curve(**kw: Any) -> Any:
    from dpsim.widgets.strategy_dashboard import StrategyExplorer

    return StrategyExplorer().curve(**kw)


def _workload(**kw: Any) -> Any:
    from dpsim.widgets.strategy_dashboard import StrategyExplorer

    return StrategyExplorer().workload(**kw)


def _collectives_ddp() -> tuple[EntryPoint, ...]:
    from dpsim.widgets import collectives_explorer as ce
    from dpsim.widgets import ddp_explorer as de
    from dpsim.widgets import memory_explorer as me

    coll, algo = (choice("collective", "all_reduce", COLLECTIVES),
                  choice("algorithm", "ring", ALGORITHMS))
    link_args = (real("latency_us", 3.0), real("bandwidth_GBps", 450.0))
    device = choice("device", "h100-80gb", DEVICES)
    link = choice("interconnect", next(iter(de.LINKS)), de.LINKS)
    return (
        EntryPoint("widgets.memory_explorer.explore", me.explore, (
            choice("model", "gpt2-124m", PRESETS),
            choice("device", "h100-80gb", [k for k, d in DEVICES.items() if d.kind == "gpu"]),
            choice("precision", "fp32", ("fp32", "bf16 mixed")),
            choice("optimizer", "adam", OPTIMIZERS), integer("batch_size", 8)), text=True),
        EntryPoint("widgets.collectives_explorer.estimate", ce.estimate, (
            coll, integer("nbytes", 2**20), integer("world_size", 8), *link_args, algo),
            text=True),
        EntryPoint("widgets.collectives_explorer.explore", ce.explore, (
            coll, algo, integer("world_size", 8), integer("nbytes", 2**20), *link_args),
            text=True),
        EntryPoint("widgets.ddp_explorer.cluster_for", de.cluster_for,
                   (device, link, integer("world_size", 8))),
        EntryPoint("widgets.ddp_explorer.explore", de.explore, (
            choice("model", "gpt2-124m", PRESETS), device, link, integer("world_size", 8),
            real("bucket_cap_mb", 25.0), integer("batch_size", 8), flag("overlap", True),
            flag("pass_cap", False), flag("first_iteration", False)),
            text=True),
    )


def _dp_strategy_zero() -> tuple[EntryPoint, ...]:
    from dpsim.widgets import dp_explorer as dpe
    from dpsim.widgets import strategy_dashboard as sd
    from dpsim.widgets import zero_explorer as ze

    dp_args = (choice("model", "gpt2-124m", dpe.MODELS), integer("n_devices", 4),
               integer("batch_size", 32), integer("out_features", 0),
               choice("cluster", "h100-node", CLUSTERS))
    summary = dpe.explore()[1]
    board = (choice("model", "gpt2-124m", PRESETS), choice("cluster", "h100-node",
                                                          sd.CLUSTER_CHOICES),
             choice("strategy", "ddp", names()))
    precision = choice("precision", "mixed", ("mixed", "fp32"))
    return (
        EntryPoint("widgets.dp_explorer.small_mlp", dpe.small_mlp),
        EntryPoint("widgets.dp_explorer.get_model", dpe.get_model, (
            choice("name", "gpt2-124m", dpe.MODELS), integer("out_features", 0))),
        EntryPoint("widgets.dp_explorer.explore", dpe.explore, dp_args, text=True),
        EntryPoint("widgets.dp_explorer.describe", dpe.describe, (
            Arg("summary", summary, DATA, extra=(
                ("missing_keys", {"model": "x"}),
                ("nan_peak", summary | {"device 0 peak": math.nan}),
                ("negative_time", summary | {"step_time_s": -1.0}))),), text=True),
        EntryPoint("widgets.dp_explorer.render", dpe.render, dp_args, text=True),
        EntryPoint("widgets.strategy_dashboard.cluster_choice", sd.cluster_choice,
                   (choice("name", "h100-node", sd.CLUSTER_CHOICES),)),
        EntryPoint("widgets.strategy_dashboard.StrategyExplorer.render", _render, (
            *board, integer("n_devices", 8), integer("global_batch", 64), precision,
            flag("activation_checkpointing", False), flag("offload", False)),
            errors_as_text="cannot simulate this setting: ", text=True),
        EntryPoint("widgets.strategy_dashboard.StrategyExplorer.curve", _curve, (
            *board, integer("global_batch", 64), precision)),
        EntryPoint("widgets.strategy_dashboard.StrategyExplorer.workload", _workload,
                   (choice("model", "gpt2-124m", PRESETS),)),
        EntryPoint("widgets.zero_explorer.model_for", ze.model_for,
                   (choice("size", "7B", ze.MODEL_SIZES),)),
        EntryPoint("widgets.zero_explorer.cluster_for", ze.cluster_for,
                   (integer("n_devices", 8), real("memory_GiB", 80.0))),
        EntryPoint("widgets.zero_explorer.explore", ze.explore, (
            choice("model", "7B", ze.MODEL_SIZES), integer("n_devices", 8),
            choice("precision", "mixed", PRECISIONS), choice("optimizer", "adam", OPTIMIZERS),
            flag("checkpointing", False), real("memory_GiB", 80.0), integer("batch_size", 1)),
            text=True),
    )


def widget_entry_points() -> tuple[EntryPoint, ...]:
    """The widgets' explore/render functions and public helpers."""
    return _collectives_ddp() + _dp_strategy_zero()
