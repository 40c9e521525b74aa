"""Chapter 7 dashboard: model, cluster, strategy, N and global batch -> one step, simulated."""

from __future__ import annotations

import reprlib
from dataclasses import replace
from functools import cache
from typing import Any

import ipywidgets as widgets

from dpsim.sim import (
    CLUSTERS,
    PLANNER_PRECISIONS,
    POWERS_OF_TWO,
    PRECISION_SETTINGS,
    PRESETS,
    Cluster,
    Link,
    PlanResult,
    Workload,
    beyond_data_parallel,
    get_cluster,
    get_strategy,
    get_workload,
    plan,
    require_bool,
    require_choice,
    require_int,
    scaling_curve,
    strategy_names,
)
from dpsim.viz.planner import plan_figure
from dpsim.widgets.dashboard import dashboard

OWN_MODEL = "your model"
MAX_GLOBAL_BATCH = 1 << 24  # the planner's bound on a global batch, samples
ETHERNET_10G = Link("Ethernet 10 Gb/s", 1.25, 50.0)  # between CPU machines beyond this one
CLUSTER_CHOICES = (*CLUSTERS, "this-machine")
GLOBAL_BATCHES = tuple(2**k for k in range(13))  # 1 .. 4096 samples
# "default": the strategy's own (torch_amp for FSDP, mixed otherwise); torch_amp: chapter 9
PRECISION_CHOICES = ("default", "mixed", "fp32", "torch_amp", "torch_amp_bf16_reduce")
# the dropdown's words: each precision with the setting it stands for (PRECISION_SETTINGS)
PRECISION_LABELS = {
    "default": "default (FSDP: torch_amp; others: mixed)",
    "mixed": "mixed: ZeRO's 2+2+12, bf16 gradients",
    "fp32": "fp32: no autocast, no mp_policy",
    "torch_amp": "torch_amp: MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)",
    "torch_amp_bf16_reduce": "torch_amp_bf16_reduce: MixedPrecisionPolicy(param_dtype=bf16)",
}


def cluster_choice(name: str) -> Cluster:
    """A preset cluster, or this machine (more such machines join over 10 Gb Ethernet)."""
    require_choice("name", name, CLUSTER_CHOICES)
    return _this_machine() if name == "this-machine" else get_cluster(name)


@cache
def _this_machine() -> Cluster:
    """This machine, detected once per process (a kernel restart detects it again), with
    10 Gb Ethernet to more such machines when it has no link of its own beyond the node."""
    from dpsim.runtime.machine import detect

    cluster = detect()
    if cluster.inter_node is None:
        cluster = replace(cluster, inter_node=ETHERNET_10G)
    return cluster


def _describe_cluster(cluster: Cluster, n_devices: int) -> str:
    """The cluster as the planner resizes it to `n_devices`: nodes, devices, links."""
    sized = cluster.with_devices(n_devices)
    inside = f"{sized.devices_per_node} x {sized.device.name} per node ({sized.intra_node.name})"
    if sized.n_nodes == 1:
        return f"{cluster.name} with {n_devices} device(s): one node, {inside}"
    between = sized.inter_node.name if sized.inter_node else "no link"
    resized = "" if n_devices == cluster.world_size else f" resized to {n_devices} devices"
    return f"{cluster.name}{resized}: {sized.n_nodes} nodes, {inside}, joined by {between}"


def model_choices(own_given: bool) -> list[str]:
    """The presets, then "your model" when the learner gave one."""
    return [*PRESETS, *([OWN_MODEL] if own_given else [])]


def check_model(model: str, own_given: bool) -> None:
    """Raise ValueError unless `model` is a preset, or "your model" with one given."""
    if model == OWN_MODEL and not own_given:
        raise ValueError(f"model={OWN_MODEL!r} needs strategy_dashboard(module=..., "
                         "example_input=...)")
    require_choice("model", model, model_choices(own_given))


class StrategyExplorer:
    """Holds the workloads and the scaling curves already simulated (one per setting)."""

    def __init__(self, own: Workload | None = None) -> None:
        if own is not None and not isinstance(own, Workload):
            raise ValueError(f"own={own!r} is not a Workload; give one (or None)")
        self.own = own
        self._workloads: dict[str, Workload] = {}
        self._curves: dict[tuple[Any, ...], list[PlanResult]] = {}

    def models(self) -> list[str]:
        """The model names this explorer knows: the presets, then the learner's own."""
        return model_choices(self.own is not None)

    def workload(self, model: str) -> Workload:
        """The preset (built once) or the learner's own model."""
        check_model(model, self.own is not None)
        return self.own if model == OWN_MODEL and self.own is not None else self._preset(model)

    def check_setting(self, model: str, cluster: str, strategy: str, global_batch: int,
                      precision: str, n_devices: int | None = None,
                      activation_checkpointing: bool = False, offload: bool = False) -> None:
        """Raise ValueError naming the first argument that is not allowed on its own."""
        check_model(model, self.own is not None)
        require_choice("cluster", cluster, CLUSTER_CHOICES)
        require_choice("strategy", strategy, strategy_names())
        if n_devices is not None:
            require_int("n_devices", n_devices, 1, max(POWERS_OF_TWO))
        require_int("global_batch", global_batch, 1, MAX_GLOBAL_BATCH)
        require_choice("precision", precision, PLANNER_PRECISIONS)
        require_bool("activation_checkpointing", activation_checkpointing)
        require_bool("offload", offload)

    def _preset(self, model: str) -> Workload:
        if model not in self._workloads:
            self._workloads[model] = get_workload(model)
        return self._workloads[model]

    def curve(self, model: str, cluster: str, strategy: str, global_batch: int,
              precision: str, activation_checkpointing: bool = False,
              offload: bool = False) -> list[PlanResult]:
        """Strong scaling of this global batch (cached: moving N does not recompute it)."""
        self.check_setting(model, cluster, strategy, global_batch, precision, None,
                           activation_checkpointing, offload)
        return self._curve(model, cluster, cluster_choice(cluster), strategy, global_batch,
                           precision, activation_checkpointing, offload)

    def _curve(self, model: str, cluster: str, chosen: Cluster, strategy: str,
               global_batch: int, precision: str, activation_checkpointing: bool,
               offload: bool) -> list[PlanResult]:
        """`curve` for checked settings, `chosen` being `cluster_choice(cluster)`."""
        key = (model, cluster, strategy, global_batch, precision, activation_checkpointing,
               offload)
        if key not in self._curves:
            self._curves[key] = scaling_curve(
                self.workload(model), chosen, strategy, global_batch, precision=precision,
                activation_checkpointing=activation_checkpointing, offload=offload)
        return self._curves[key]

    def render(self, model: str, cluster: str, strategy: str, n_devices: int,
               global_batch: int, precision: str, activation_checkpointing: bool = False,
               offload: bool = False) -> list[Any]:
        """[figure, summary line], or the reason this combination of settings cannot run.

        An argument that is not allowed on its own (an unknown name, a non-integer) raises
        ValueError; a combination the planner refuses (N beyond the cluster, a global batch
        that does not split over N) is reported as text, as the dashboard shows it.
        """
        self.check_setting(model, cluster, strategy, global_batch, precision, n_devices,
                           activation_checkpointing, offload)
        try:
            chosen = cluster_choice(cluster)  # once per render: every use below shares it
            w = self.workload(model)
            p = plan(w, chosen, strategy, n_devices, global_batch,
                     precision=precision, activation_checkpointing=activation_checkpointing,
                     offload=offload)
            curve = self._curve(model, cluster, chosen, strategy, global_batch, precision,
                                activation_checkpointing, offload)
        except ValueError as err:
            return [f"cannot simulate this setting: {err}"]
        oom = p.oom_devices
        used = get_strategy(strategy).default_precision if precision == "default" else precision
        text = (f"simulated: {w.name}, {p.label}, N={n_devices}: step "
                f"{p.step_s * 1e3:.3g} ms = compute {p.compute_s * 1e3:.3g} + exposed comm "
                f"{p.exposed_comm_s * 1e3:.3g} + host {p.other_s * 1e3:.3g} ms "
                f"(hidden comm {p.hidden_comm_s * 1e3:.3g} ms); "
                f"{p.samples_per_s:,.0f} samples/s; {p.scaling_efficiency:.0%} of one device's "
                "throughput at the same local batch; "
                + (f"OUT OF MEMORY on {len(oom)} of {n_devices} device(s)" if oom
                   else "fits in memory")
                + f"\nprecision {used!r}: {PRECISION_SETTINGS[used]}")
        if oom:  # say what comes after data parallelism when none of it fits
            beyond = beyond_data_parallel(w, chosen, n_devices, global_batch)
            text += "".join(f"\n- {line}" for line in beyond.advice)
        return [plan_figure(p, curve, where=_describe_cluster(chosen, n_devices)), text]


def strategy_dashboard(model: str = "gpt2-124m", cluster: str = "h100-ib-128",
                       strategy: str = "ddp", n_devices: int = 8, global_batch: int = 256,
                       *, module: Any = None, example_input: Any = None) -> widgets.VBox:
    """The dashboard; pass `module` and `example_input` to add "your model" to the list."""
    check_model(model, module is not None)
    require_choice("cluster", cluster, CLUSTER_CHOICES)
    require_choice("strategy", strategy, strategy_names())
    require_int("n_devices", n_devices, 1)
    require_choice("n_devices", n_devices, POWERS_OF_TWO)
    require_int("global_batch", global_batch, 1)
    require_choice("global_batch", global_batch, GLOBAL_BATCHES)
    explorer = StrategyExplorer(own_workload(module, example_input))
    controls = {
        "model": widgets.Dropdown(options=explorer.models(), value=model, description="model"),
        "cluster": widgets.Dropdown(options=list(CLUSTER_CHOICES), value=cluster,
                                    description="cluster"),
        "strategy": widgets.Dropdown(options=[(get_strategy(s).label, s) for s in strategy_names()],
                                     value=strategy, description="strategy"),
        "n_devices": widgets.SelectionSlider(options=list(POWERS_OF_TWO), value=n_devices,
                                             description="N"),
        "global_batch": widgets.Dropdown(options=list(GLOBAL_BATCHES),
                                         value=global_batch, description="global batch"),
        "precision": widgets.Dropdown(options=[(PRECISION_LABELS[p], p)
                                               for p in PRECISION_CHOICES],
                                      value="default", description="precision"),
        "activation_checkpointing": widgets.Checkbox(value=False, description="checkpointing"),
        "offload": widgets.Checkbox(value=False, description="CPU offload"),
    }
    return dashboard(controls, explorer.render)


def own_workload(module: Any, example_input: Any) -> Workload | None:
    """The learner's module as a Workload, measured by one forward pass (None without one)."""
    if module is None:
        if example_input is not None:
            raise ValueError("module=None is not allowed with an example_input; give the "
                             "torch.nn.Module that the example batch is for")
        return None
    import torch

    from dpsim.runtime.capture import workload_from_module

    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module={module!r} is not a torch.nn.Module; give one (or None)")
    batch = _first_tensor(example_input, torch.Tensor)
    if batch is None or batch.dim() == 0 or batch.shape[0] < 1:
        raise ValueError(f"example_input={reprlib.repr(example_input)} is not allowed; give a "
                         "tensor (or a tuple holding one) with a batch dimension >= 1")
    try:
        return workload_from_module(module, example_input)
    except (RuntimeError, TypeError) as err:  # torch's own words for a batch the module refuses
        raise ValueError(f"example_input={reprlib.repr(example_input)} does not run through "
                         f"module: {err}") from err


def _first_tensor(x: Any, tensor_type: type) -> Any:
    """The first tensor in `x` (itself, or depth-first in nested tuples and lists), or None."""
    if isinstance(x, tensor_type):
        return x
    for item in x if isinstance(x, (tuple, list)) else ():
        found = _first_tensor(item, tensor_type)
        if found is not None:
            return found
    return None
