"""The chapter-7 dashboard chooses its cluster once per render and detects this machine once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dpsim.runtime import machine
from dpsim.sim.hardware import Cluster, get_cluster
from dpsim.widgets import strategy_dashboard as sd


@pytest.fixture
def fresh_detection() -> Iterator[None]:
    """No detection cached before the test, and none of the test's left after it."""
    sd._this_machine.cache_clear()
    yield
    sd._this_machine.cache_clear()


@pytest.mark.parametrize(("model", "cluster"), [
    ("resnet50", "h100-node"),  # fits: plan, curve and the figure's cluster description
    ("llama-70b", "h100-node"),  # out of memory: also what comes after data parallelism
    ("resnet50", "this-machine"),
])
def test_one_cluster_choice_per_render(monkeypatch: pytest.MonkeyPatch, model: str,
                                       cluster: str) -> None:
    calls: list[str] = []
    choose = sd.cluster_choice

    def counted(name: str) -> Cluster:
        calls.append(name)
        return choose(name)

    monkeypatch.setattr(sd, "cluster_choice", counted)
    explorer = sd.StrategyExplorer()
    _fig, text = explorer.render(model, cluster, "ddp", 1, 64, "mixed")
    assert text.startswith("simulated")
    assert calls == [cluster]
    explorer.render(model, cluster, "ddp", 1, 32, "mixed")  # a new curve: still one choice
    assert calls == [cluster, cluster]


def test_this_machine_is_detected_once(monkeypatch: pytest.MonkeyPatch,
                                       fresh_detection: None) -> None:
    detected: list[Cluster] = []

    def detect() -> Any:
        detected.append(get_cluster("h100-node"))
        return detected[-1]

    monkeypatch.setattr(machine, "detect", detect)
    explorer = sd.StrategyExplorer()
    for batch in (64, 32):
        explorer.render("resnet50", "this-machine", "ddp", 1, batch, "mixed")
    sd.StrategyExplorer().curve("resnet50", "this-machine", "fsdp", 64, "mixed")
    assert len(detected) == 1
    chosen = sd.cluster_choice("this-machine")
    assert chosen.inter_node == sd.ETHERNET_10G  # a node with no link beyond it gets Ethernet
    assert chosen == sd.cluster_choice("this-machine")
