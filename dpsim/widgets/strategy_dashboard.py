"""Chapter 7 dashboard: model, cluster, strategy, N and global batch -> one step, simulated."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import ipywidgets as widgets

from dpsim.hardware import CLUSTERS, Cluster, Link, get_cluster
from dpsim.planner import POWERS_OF_TWO, PlanResult, plan, scaling_curve
from dpsim.strategies.registry import get_strategy, names
from dpsim.viz.planner import plan_figure
from dpsim.widgets.dashboard import dashboard
from dpsim.workload import PRESETS, Workload, get_workload

OWN_MODEL = "your model"
ETHERNET_10G = Link("Ethernet 10 Gb/s", 1.25, 50.0)  # between CPU machines beyond this one
CLUSTER_CHOICES = (*CLUSTERS, "this-machine")


def cluster_choice(name: str) -> Cluster:
    """A preset cluster, or this machine (more such machines join over 10 Gb Ethernet)."""
    if name != "this-machine":
        return get_cluster(name)
    from dpsim.runtime.machine import detect

    cluster = detect()
    if cluster.inter_node is None:
        cluster = replace(cluster, inter_node=ETHERNET_10G)
    return cluster


class StrategyExplorer:
    """Holds the workloads and the scaling curves already simulated (one per setting)."""

    def __init__(self, own: Workload | None = None) -> None:
        self.own = own
        self._workloads: dict[str, Workload] = {}
        self._curves: dict[tuple[Any, ...], list[PlanResult]] = {}

    def workload(self, model: str) -> Workload:
        """The preset (built once) or the learner's own model."""
        if model == OWN_MODEL:
            if self.own is None:
                raise ValueError(f"model={OWN_MODEL!r} needs strategy_dashboard(module=..., "
                                 "example_input=...)")
            return self.own
        if model not in self._workloads:
            self._workloads[model] = get_workload(model)
        return self._workloads[model]

    def curve(self, model: str, cluster: str, strategy: str, global_batch: int,
              precision: str) -> list[PlanResult]:
        """Strong scaling of this global batch (cached: moving N does not recompute it)."""
        key = (model, cluster, strategy, global_batch, precision)
        if key not in self._curves:
            self._curves[key] = scaling_curve(self.workload(model), cluster_choice(cluster),
                                              strategy, global_batch, precision=precision)
        return self._curves[key]

    def render(self, model: str, cluster: str, strategy: str, n_devices: int,
               global_batch: int, precision: str) -> list[Any]:
        """[figure, summary line], or the reason this setting cannot run."""
        try:
            w = self.workload(model)
            p = plan(w, cluster_choice(cluster), strategy, n_devices, global_batch,
                     precision=precision)
            curve = self.curve(model, cluster, strategy, global_batch, precision)
        except ValueError as err:
            return [f"cannot simulate this setting: {err}"]
        oom = p.oom_devices
        text = (f"simulated: {w.name}, {p.label}, N={n_devices}: step "
                f"{p.step_s * 1e3:.3g} ms = compute {p.compute_s * 1e3:.3g} + exposed comm "
                f"{p.exposed_comm_s * 1e3:.3g} + host {p.other_s * 1e3:.3g} ms "
                f"(hidden comm {p.hidden_comm_s * 1e3:.3g} ms); "
                f"{p.samples_per_s:,.0f} samples/s; efficiency {p.scaling_efficiency:.0%}; "
                + (f"OUT OF MEMORY on {len(oom)} of {n_devices} device(s)" if oom
                   else "fits in memory"))
        return [plan_figure(p, curve), text]


def strategy_dashboard(model: str = "gpt2-124m", cluster: str = "h100-ib-128",
                       strategy: str = "ddp", n_devices: int = 8, global_batch: int = 256,
                       *, module: Any = None, example_input: Any = None) -> widgets.VBox:
    """The dashboard; pass `module` and `example_input` to add "your model" to the list."""
    own = None
    if module is not None:
        from dpsim.runtime.capture import workload_from_module

        own = workload_from_module(module, example_input)
    models = [*PRESETS, *([OWN_MODEL] if own is not None else [])]
    explorer = StrategyExplorer(own)
    controls = {
        "model": widgets.Dropdown(options=models, value=model, description="model"),
        "cluster": widgets.Dropdown(options=list(CLUSTER_CHOICES), value=cluster,
                                    description="cluster"),
        "strategy": widgets.Dropdown(options=[(get_strategy(s).label, s) for s in names()],
                                     value=strategy, description="strategy"),
        "n_devices": widgets.SelectionSlider(options=list(POWERS_OF_TWO), value=n_devices,
                                             description="N"),
        "global_batch": widgets.Dropdown(options=[2**k for k in range(13)],
                                         value=global_batch, description="global batch"),
        "precision": widgets.Dropdown(options=["mixed", "fp32"], value="mixed",
                                      description="precision"),
    }
    return dashboard(controls, explorer.render)
