"""The widgets' entry points refuse bad input with a ValueError naming the caller's field.

Each bad call must raise before any widget is built; valid calls give the texts they gave
before the checks were added (literals below, printed by the unchanged code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
import pytest
import torch

from dpsim.sim import PRECISION_SETTINGS
from dpsim.widgets import collectives_explorer as ce
from dpsim.widgets import ddp_explorer as dde
from dpsim.widgets import dp_explorer as dpe
from dpsim.widgets import memory_explorer as me
from dpsim.widgets import strategy_dashboard as sd
from dpsim.widgets import zero_explorer as ze
from dpsim.widgets.dashboard import dashboard

NAN, INF = float("nan"), float("inf")
PCIE = "PCIe 4.0 x16"


def _any(value: object) -> Any:
    """`value` typed as Any: a wrong type passed on purpose."""
    return value


def _me(**kw: Any) -> Callable[[], Any]:
    args: dict[str, Any] = {
        "model": "gpt2-124m", "device": "h100-80gb", "precision": "fp32",
        "optimizer": "adam", "batch_size": 8} | kw
    return lambda: me.explore(**args)


def _ze(**kw: Any) -> Callable[[], Any]:
    args: dict[str, Any] = {
        "model": "7B", "n_devices": 8, "precision": "mixed", "optimizer": "adam",
        "checkpointing": False, "memory_GiB": 80, "batch_size": 1} | kw
    return lambda: ze.explore(**args)


def _dp(fn: Callable[..., Any] = dpe.render, **kw: Any) -> Callable[[], Any]:
    args: dict[str, Any] = {
        "model": "gpt2-124m", "n_devices": 4, "batch_size": 32, "out_features": 0,
        "cluster": "h100-node"} | kw
    return lambda: fn(**args)


def _ddp(**kw: Any) -> Callable[[], Any]:
    args: dict[str, Any] = {
        "model": "gpt2-124m", "device": "h100-80gb", "interconnect": PCIE,
        "world_size": 4, "bucket_cap_mb": 25.0, "batch_size": 8, "overlap": True} | kw
    return lambda: dde.explore(**args)


def _ce(**kw: Any) -> Callable[[], Any]:
    args: dict[str, Any] = {
        "collective": "all_reduce", "algorithm": "ring", "world_size": 8,
        "nbytes": 2**20, "latency_us": 3.0, "bandwidth_GBps": 300.0} | kw
    return lambda: ce.explore(**args)


def _sd(**kw: Any) -> Callable[[], Any]:
    args: dict[str, Any] = {
        "model": "resnet50", "cluster": "h100-node", "strategy": "ddp", "n_devices": 8,
        "global_batch": 64, "precision": "mixed"} | kw
    return lambda: sd.StrategyExplorer().render(**args)


BAD_CALLS = [
    # memory_explorer.explore
    pytest.param(_me(model="gpt9"), "model", id="me-model"),
    pytest.param(_me(device="tpu"), "device", id="me-device"),
    pytest.param(_me(precision="fp8"), "precision", id="me-precision-unknown"),
    pytest.param(_me(precision="mixed"), "precision", id="me-precision-other-widget"),
    pytest.param(_me(optimizer="lion"), "optimizer", id="me-optimizer"),
    pytest.param(_me(batch_size=0), "batch_size", id="me-batch-0"),
    pytest.param(_me(batch_size=2.5), "batch_size", id="me-batch-float"),
    pytest.param(_me(batch_size=True), "batch_size", id="me-batch-bool"),
    # zero_explorer
    pytest.param(_ze(model="9B"), "model", id="ze-model-unknown"),
    pytest.param(_ze(model="gpt2-124m"), "model", id="ze-model-preset-name"),
    pytest.param(_ze(n_devices=0), "n_devices", id="ze-n-0"),
    pytest.param(_ze(n_devices=8.0), "n_devices", id="ze-n-float"),
    pytest.param(_ze(n_devices=12), "n_devices", id="ze-n-not-whole-nodes"),
    pytest.param(_ze(precision="fp8"), "precision", id="ze-precision"),
    pytest.param(_ze(optimizer="lion"), "optimizer", id="ze-optimizer"),
    pytest.param(_ze(checkpointing="yes"), "checkpointing", id="ze-checkpointing"),
    pytest.param(_ze(memory_GiB=0), "memory_GiB", id="ze-mem-0"),
    pytest.param(_ze(memory_GiB=INF), "memory_GiB", id="ze-mem-inf"),
    pytest.param(_ze(memory_GiB=NAN), "memory_GiB", id="ze-mem-nan"),
    pytest.param(_ze(memory_GiB="80"), "memory_GiB", id="ze-mem-str"),
    pytest.param(_ze(batch_size=0), "batch_size", id="ze-batch"),
    pytest.param(lambda: ze.model_for("9B"), "size", id="ze-model_for"),
    pytest.param(lambda: ze.cluster_for(8, -1.0), "memory_GiB", id="ze-cluster_for"),
    # dp_explorer
    pytest.param(_dp(model="gpt9"), "model", id="dp-model"),
    pytest.param(_dp(n_devices=0), "n_devices", id="dp-n-0"),
    pytest.param(_dp(n_devices=9), "n_devices", id="dp-n-beyond-node"),
    pytest.param(_dp(n_devices=2.0), "n_devices", id="dp-n-float"),
    pytest.param(_dp(batch_size=0), "batch_size", id="dp-batch"),
    pytest.param(_dp(out_features=-1), "out_features", id="dp-out-negative"),
    pytest.param(_dp(out_features=1.5), "out_features", id="dp-out-float"),
    pytest.param(_dp(cluster="tpu"), "cluster", id="dp-render-cluster"),
    pytest.param(_dp(dpe.explore, model="x"), "model", id="dp-explore-model"),
    pytest.param(lambda: dpe.get_model("x"), "name", id="dp-get_model-name"),
    pytest.param(lambda: dpe.get_model("mlp", -5), "out_features", id="dp-get_model-out"),
    pytest.param(lambda: dpe.describe({"model": "m"}), "summary", id="dp-describe"),
    pytest.param(lambda: dpe.dp_explorer("tpu"), "cluster", id="dp-explorer-cluster"),
    # ddp_explorer
    pytest.param(_ddp(model="x"), "model", id="ddp-model"),
    pytest.param(_ddp(device="x"), "device", id="ddp-device"),
    pytest.param(_ddp(interconnect="x"), "interconnect", id="ddp-link"),
    pytest.param(_ddp(world_size=0), "world_size", id="ddp-ws-0"),
    pytest.param(_ddp(world_size=2000), "world_size", id="ddp-ws-big"),
    pytest.param(_ddp(bucket_cap_mb=0), "bucket_cap_mb", id="ddp-bucket-0"),
    pytest.param(_ddp(bucket_cap_mb=INF), "bucket_cap_mb", id="ddp-bucket-inf"),
    pytest.param(_ddp(batch_size=0), "batch_size", id="ddp-batch"),
    pytest.param(_ddp(overlap=1), "overlap", id="ddp-overlap"),
    pytest.param(lambda: dde.cluster_for("h100-80gb", "x", 4), "interconnect",
                 id="ddp-cluster_for"),
    pytest.param(lambda: dde.ddp_explorer(model="x"), "model", id="ddp-explorer-model"),
    pytest.param(lambda: dde.ddp_explorer(device="tpu"), "device", id="ddp-explorer-device"),
    pytest.param(lambda: dde.ddp_explorer(interconnect="x"), "interconnect",
                 id="ddp-explorer-link"),
    # collectives_explorer
    pytest.param(_ce(collective="allreduce"), "collective", id="ce-collective"),
    pytest.param(_ce(algorithm="x"), "algorithm", id="ce-algorithm"),
    pytest.param(_ce(world_size=0), "world_size", id="ce-ws"),
    pytest.param(_ce(nbytes=1.5), "nbytes", id="ce-nbytes"),
    pytest.param(_ce(latency_us=INF), "latency_us", id="ce-latency-inf"),
    pytest.param(_ce(bandwidth_GBps=INF), "bandwidth_GBps", id="ce-bw-inf"),
    pytest.param(_ce(bandwidth_GBps=NAN), "bandwidth_GBps", id="ce-bw-nan"),
    pytest.param(lambda: ce.Estimate(1.0, 1.0, 1.0, 0.5).describe("x", 1, 2, "ring"),
                 "collective", id="ce-describe"),
    pytest.param(lambda: ce.collectives_explorer("x"), "preset", id="ce-explorer-preset"),
    # strategy_dashboard
    pytest.param(lambda: sd.cluster_choice("x"), "name", id="sd-cluster_choice"),
    pytest.param(_sd(model="x"), "model", id="sd-render-model"),
    pytest.param(_sd(model=sd.OWN_MODEL), "model", id="sd-render-own-missing"),
    pytest.param(_sd(cluster="x"), "cluster", id="sd-render-cluster"),
    pytest.param(_sd(strategy="x"), "strategy", id="sd-render-strategy"),
    pytest.param(_sd(n_devices=0), "n_devices", id="sd-render-n-0"),
    pytest.param(_sd(n_devices=8.0), "n_devices", id="sd-render-n-float"),
    pytest.param(_sd(global_batch=0), "global_batch", id="sd-render-gb"),
    pytest.param(_sd(precision="bf16"), "precision", id="sd-render-precision"),
    pytest.param(lambda: sd.StrategyExplorer(own=_any("gpt2-124m")), "own",
                 id="sd-explorer-own"),
    pytest.param(lambda: sd.strategy_dashboard(model="x"), "model", id="sd-dash-model"),
    pytest.param(lambda: sd.strategy_dashboard(model=sd.OWN_MODEL), "model",
                 id="sd-dash-own-missing"),
    pytest.param(lambda: sd.strategy_dashboard(cluster="x"), "cluster", id="sd-dash-cluster"),
    pytest.param(lambda: sd.strategy_dashboard(strategy="x"), "strategy", id="sd-dash-strategy"),
    pytest.param(lambda: sd.strategy_dashboard(n_devices=3), "n_devices", id="sd-dash-n-3"),
    pytest.param(lambda: sd.strategy_dashboard(n_devices=2048), "n_devices",
                 id="sd-dash-n-big"),
    pytest.param(lambda: sd.strategy_dashboard(global_batch=100), "global_batch",
                 id="sd-dash-gb-100"),
    pytest.param(lambda: sd.strategy_dashboard(global_batch=True), "global_batch",
                 id="sd-dash-gb-bool"),
    pytest.param(lambda: sd.strategy_dashboard(module=object()), "module", id="sd-dash-module"),
    pytest.param(lambda: sd.strategy_dashboard(example_input=torch.ones(2, 3)), "module",
                 id="sd-dash-input-without-module"),
    pytest.param(lambda: sd.strategy_dashboard(module=torch.nn.Linear(3, 2)), "example_input",
                 id="sd-dash-module-without-input"),
    pytest.param(lambda: sd.strategy_dashboard(module=torch.nn.Linear(3, 2),
                                               example_input=torch.tensor(1.0)),
                 "example_input", id="sd-dash-input-scalar"),
    # dashboard
    pytest.param(lambda: dashboard({}, print, columns=0), "columns", id="dash-columns-0"),
    pytest.param(lambda: dashboard({}, print, columns=_any(1.5)), "columns",
                 id="dash-columns-float"),
    pytest.param(lambda: dashboard({}, _any(None)), "render", id="dash-render"),
    pytest.param(lambda: dashboard(_any([1]), print), "controls", id="dash-controls"),
    pytest.param(lambda: dashboard(_any({"x": 1}), print), "controls",
                 id="dash-controls-value"),
]


@pytest.mark.parametrize(("call", "field"), BAD_CALLS)
def test_bad_call_names_the_field_before_building_a_widget(
        call: Callable[[], Any], field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[widgets.Widget] = []
    opened = widgets.Widget.open

    def counting_open(self: widgets.Widget) -> None:
        built.append(self)
        opened(self)

    monkeypatch.setattr(widgets.Widget, "open", counting_open)
    with pytest.raises(ValueError, match=r"^[^=]+=") as err:
        call()
    assert str(err.value).startswith(f"{field}="), str(err.value)
    assert built == []


# --- valid calls: the same texts as before --------------------------------------------------
def test_memory_explorer_texts_unchanged() -> None:
    fig, line = _me()()
    assert line == "simulated: 9.7 GiB (fits); step 180.3 ms; 44.4 samples/s"
    assert isinstance(fig, go.Figure)
    assert fig.layout.title.text == ("Simulated memory on one H100 80GB SXM (device memory "
                                     "80 GiB: far from full)")
    _, line = _me(model="llama-7b", device="a100-40gb", precision="bf16 autocast",
                  optimizer="sgd", batch_size=4)()
    assert line == "simulated: 120.3 GiB (OUT OF MEMORY); step 4088.5 ms; 1.0 samples/s"


def test_zero_explorer_texts_unchanged() -> None:
    bars, grid, line = _ze()()
    assert line == "simulated: fits under ZeRO-1, ZeRO-2, ZeRO-3 (FSDP)"
    assert isinstance(grid, go.Figure)
    assert bars.layout.title.text == ("7B transformer on 8 x 80 GiB: simulated peak memory "
                                      "per device")
    *_, line = _ze(model="124M", n_devices=1, precision="fp32", optimizer="adamw",
                   memory_GiB=16, batch_size=16)()
    assert line == "simulated: out of memory under every stage; add devices or checkpointing"
    *_, line = _ze(n_devices=3)()  # off the sliders, still allowed
    assert line == "simulated: fits under ZeRO-1, ZeRO-2, ZeRO-3 (FSDP)"
    *_, line = _ze(memory_GiB=33.5)()
    assert line == "simulated: fits under ZeRO-3 (FSDP)"


def test_dp_explorer_texts_unchanged() -> None:
    text, fig = _dp()()
    assert text == (
        "simulated: GPT-2 124M, chunks [8, 8, 8, 8]\n"
        "device 0 peak 24.6 GiB, largest other 6.8 GiB (device 0 holds 3.62x)\n"
        "step 222.91 ms\n"
        "extra on device 0 when the loss is computed: optimizer 949.4 MiB, input 192.0 KiB, "
        "gathered 6.1 GiB, loss 12.3 GiB")
    assert isinstance(fig, go.Figure)
    text, _ = _dp(model="llama-7b", n_devices=2, batch_size=8, out_features=10,
                  cluster="pcie-4gpu")()
    assert text.splitlines()[2] == "step 66843.69 ms; device 0 runs OUT OF MEMORY"
    _, summary = _dp(dpe.explore, batch_size=2)()
    assert summary["chunks"] == [1, 1]


def test_ddp_explorer_text_unchanged() -> None:
    *figs, text = _ddp()()
    # the buckets pay NCCL's (algorithm, protocol) cost on the PCIe link (collectives.group_cost)
    assert text == ("simulated, N=4: step 27.96 ms = compute 18.84 ms + exposed comm 9.12 ms; "
                    "comm 15.14 ms in 7 buckets, 40% hidden; scaling efficiency 67%; caps 25 MiB, "
                    "first bucket 1 MiB (torch defaults)")
    assert all(isinstance(f, go.Figure) for f in figs)


def test_collectives_explorer_text_unchanged() -> None:
    text, fig = _ce(nbytes=64 * 2**20)()
    assert text == ("simulated: all_reduce of 64.0 MiB on 8 ranks (ring) takes 0.433 ms; algbw "
                    "154.8 GB/s, busbw 270.9 GB/s; 10% of the time is latency")
    assert isinstance(fig, go.Figure)


def test_strategy_explorer_texts_unchanged() -> None:
    fig, text = _sd(strategy="fsdp")()
    assert text == ("simulated: ResNet-50, FSDP / ZeRO-3, N=8: step 6.01 ms = compute 5.52 + "
                    "exposed comm 0.487 + host 0 ms (hidden comm 0.484 ms); 10,649 samples/s; "
                    "96% of one device's throughput at the same local batch; fits in memory"
                    "\nprecision 'mixed': " + PRECISION_SETTINGS["mixed"])
    assert isinstance(fig, go.Figure)
    (msg,) = _sd(global_batch=4)()  # a combination the planner refuses stays a message
    assert msg == ("cannot simulate this setting: global_batch=4 does not split over "
                   "n_devices=8; allowed: a multiple of 8")


def test_constructors_build_with_valid_arguments() -> None:
    box = dde.ddp_explorer(model="gpt-1.3b", device="a100-80gb", interconnect=PCIE)
    values = {w.description: w.value for row in box.children[:3] for w in row.children}
    assert (values["model"], values["device"], values["link"]) == ("gpt-1.3b", "a100-80gb", PCIE)
    board = sd.strategy_dashboard(model="resnet50", cluster="pcie-4gpu", n_devices=4,
                                  global_batch=64)
    assert board.children[0].children[0].value == "resnet50"
    own = sd.strategy_dashboard(model=sd.OWN_MODEL, module=torch.nn.Linear(3, 2),
                                example_input=torch.ones(4, 3), n_devices=2, global_batch=8)
    assert sd.OWN_MODEL in own.children[0].children[0].options
    assert isinstance(dashboard({"x": widgets.IntSlider(value=1)}, lambda x: str(x), columns=1),
                      widgets.VBox)


def test_own_model_batch_that_does_not_fit_the_module_names_example_input() -> None:
    with pytest.raises(ValueError, match=r"^example_input=.* does not run through module"):
        sd.strategy_dashboard(model=sd.OWN_MODEL, module=torch.nn.Linear(3, 2),
                              example_input=torch.ones(4, 5))
    board = sd.strategy_dashboard(model=sd.OWN_MODEL, module=torch.nn.Linear(3, 2),
                                  example_input=(torch.ones(4, 3),), n_devices=2,
                                  global_batch=8)  # a tuple of inputs, as before
    assert board.children[0].children[0].value == sd.OWN_MODEL
