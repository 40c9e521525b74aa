"""Chapter 2 explorer: N, message size, latency, bandwidth, algorithm -> time, algbw, busbw.

Everything shown is simulated with the alpha-beta closed forms of `dpsim.sim.collectives.cost`.
A preset starts the sliders at its link's achieved bandwidth
(`collectives.group_cost.achieved_link`: the spec x the fraction NCCL reaches on that kind
of link, `collectives.link_constants`), not the datasheet's line rate; the bandwidth slider
says "achieved".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets

from dpsim.sim import (
    ALGORITHMS,
    CLUSTERS,
    COLLECTIVES,
    INFINIBAND_NDR,
    NVLINK4,
    PCIE4_X16,
    Link,
    achieved_link,
    algbw_GBps,
    bus_bandwidth_factor,
    collective_time_s,
    cost_terms,
    model_series,
    require_choice,
    require_finite,
    require_int,
)
from dpsim.viz.style import human_bytes
from dpsim.viz.traffic import cost_curves_figure
from dpsim.widgets.dashboard import dashboard

SIZES_BYTES = tuple(2**k for k in range(10, 33))  # 1 KiB .. 4 GiB


@dataclass(frozen=True)
class Preset:
    """A named machine: how many ranks and the link their collectives cross (achieved)."""

    name: str
    world_size: int
    link: Link


PRESETS: dict[str, Preset] = {
    "NVLink node": Preset("NVLink node", CLUSTERS["h100-node"].world_size,
                          achieved_link(NVLINK4)),
    "PCIe box": Preset("PCIe box", CLUSTERS["pcie-4gpu"].world_size, achieved_link(PCIE4_X16)),
    "InfiniBand cluster": Preset("InfiniBand cluster", CLUSTERS["h100-ib-16"].world_size,
                                 achieved_link(INFINIBAND_NDR)),
}


@dataclass(frozen=True)
class Estimate:
    """The explorer's numbers for one setting (simulated)."""

    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    latency_share: float  # fraction of the time spent on alpha terms

    def describe(self, collective: str, nbytes: int, world_size: int, algorithm: str) -> str:
        """One line for the learner (nbytes in bytes)."""
        require_choice("collective", collective, COLLECTIVES)
        require_int("nbytes", nbytes, 0)
        require_int("world_size", world_size, 1)
        require_choice("algorithm", algorithm, ALGORITHMS)
        return (f"simulated: {collective} of {human_bytes(nbytes)} on {world_size} ranks "
                f"({algorithm}) takes {self.time_s * 1e3:.3f} ms; algbw "
                f"{self.algbw_GBps:.1f} GB/s, busbw {self.busbw_GBps:.1f} GB/s; "
                f"{100 * self.latency_share:.0f}% of the time is latency")


def estimate(collective: str, nbytes: int, world_size: int, latency_us: float,
             bandwidth_GBps: float, algorithm: str = "ring") -> Estimate:
    """Time, algbw and busbw of one collective under the alpha-beta model."""
    require_choice("collective", collective, COLLECTIVES)
    require_choice("algorithm", algorithm, ALGORITHMS)
    require_int("world_size", world_size, 1)
    require_int("nbytes", nbytes, 0)
    require_finite("bandwidth_GBps", bandwidth_GBps, 0, low_inclusive=False)
    require_finite("latency_us", latency_us, 0)
    link = Link("custom", bandwidth_GBps, latency_us)
    t = collective_time_s(collective, nbytes, world_size, link, algorithm)
    if t <= 0:
        return Estimate(0.0, 0.0, 0.0, 0.0)
    n_alpha, _ = cost_terms(collective, world_size, algorithm)
    alg = algbw_GBps(nbytes, t)
    return Estimate(t, alg, alg * bus_bandwidth_factor(collective, world_size),
                    n_alpha * latency_us * 1e-6 / t)


def explore(collective: str, algorithm: str, world_size: int, nbytes: int, latency_us: float,
            bandwidth_GBps: float) -> list[Any]:
    """[one line of numbers, the cost curves figure] for the dashboard (us, GB/s, bytes)."""
    result = estimate(collective, nbytes, world_size, latency_us, bandwidth_GBps, algorithm)
    link = Link(f"{bandwidth_GBps:.3g} GB/s, {latency_us:.3g} us", bandwidth_GBps, latency_us)
    curves = model_series(collective, world_size, link, SIZES_BYTES)
    fig = cost_curves_figure(curves, collective, world_size, link,
                             (nbytes, result.time_s, result.busbw_GBps), algorithm)
    return [result.describe(collective, nbytes, world_size, algorithm), fig]


def collectives_explorer(preset: str = "NVLink node") -> widgets.VBox:
    """The dashboard; a preset sets N, latency and bandwidth (then move them freely)."""
    require_choice("preset", preset, PRESETS)
    start = PRESETS[preset]
    chooser = widgets.Dropdown(options=list(PRESETS), value=preset, description="preset")
    controls: dict[str, widgets.Widget] = {
        "collective": widgets.Dropdown(options=list(COLLECTIVES), value="all_reduce",
                                       description="collective"),
        "algorithm": widgets.ToggleButtons(options=list(ALGORITHMS), value="ring",
                                           description="algorithm",
                                           style={"button_width": "auto"}),
        "world_size": widgets.IntSlider(value=start.world_size, min=2, max=1024,
                                        description="N ranks", continuous_update=False),
        "nbytes": widgets.SelectionSlider(
            options=[(human_bytes(s), s) for s in SIZES_BYTES], value=64 * 2**20,
            description="message", continuous_update=False),
        "latency_us": widgets.FloatLogSlider(value=start.link.latency_us, base=10, min=-1,
                                             max=3, step=0.05, description="latency us",
                                             continuous_update=False),
        "bandwidth_GBps": widgets.FloatLogSlider(value=start.link.bandwidth_GBps, base=10,
                                                 min=-1, max=3, step=0.05,
                                                 description="achieved GB/s",
                                                 continuous_update=False),
    }

    def apply(change: dict[str, Any]) -> None:
        chosen = PRESETS[change["new"]]
        controls["world_size"].value = chosen.world_size
        controls["latency_us"].value = chosen.link.latency_us
        controls["bandwidth_GBps"].value = chosen.link.bandwidth_GBps

    chooser.observe(apply, names="value")
    return dashboard(controls, explore, header=[chooser])
