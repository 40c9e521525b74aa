"""Chapter 5 explorer: bucket_cap_mb, N, model and interconnect -> a DDP step, simulated."""

from __future__ import annotations

import math
from typing import Any

import ipywidgets as widgets

from dpsim.sim import (
    DEFAULT_BUCKET_CAP_MB,
    DEVICES,
    INFINIBAND_NDR,
    NVLINK3,
    NVLINK4,
    PCIE4_X16,
    PRESETS,
    SHARED_MEMORY,
    Cluster,
    DDPConfig,
    Link,
    buckets_of,
    first_bucket_cap_for,
    get_workload,
    require_bool,
    require_choice,
    require_finite,
    require_int,
    scaling,
    simulate,
    step_result,
)
from dpsim.viz.ddp_timeline import scaling_figure
from dpsim.viz.timeline import timeline
from dpsim.widgets.dashboard import dashboard

LINKS: dict[str, Link] = {link.name: link for link in
                          (NVLINK4, NVLINK3, PCIE4_X16, INFINIBAND_NDR, SHARED_MEMORY)}
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def cluster_for(device: str, interconnect: str, world_size: int) -> Cluster:
    """`world_size` devices whose all-reduce runs over the `interconnect` link."""
    require_choice("device", device, DEVICES)
    require_choice("interconnect", interconnect, LINKS)
    require_int("world_size", world_size, 1, max(WORLD_SIZES))
    link = LINKS[interconnect]
    return Cluster(f"{world_size} x {DEVICES[device].name} over {link.name}", DEVICES[device],
                   world_size, 1, link)


def explore(model: str, device: str, interconnect: str, world_size: int,
            bucket_cap_mb: float, batch_size: int, overlap: bool, pass_cap: bool = False,
            first_iteration: bool = False) -> list[Any]:
    """Simulate one step at `world_size` and a sweep of N; return [timeline, scaling, text].

    `bucket_cap_mb` is in MiB, as in torch's DDP, and used only when `pass_cap` (passed to
    DDP explicitly, it caps the first bucket too); otherwise torch's defaults apply: 25 MiB
    and a 1 MiB first bucket. `first_iteration`: DDP's first step with the default
    find_unused_parameters=False, one bucket of every gradient. The text gives times in ms.
    """
    require_choice("model", model, PRESETS)
    require_choice("device", device, DEVICES)
    require_choice("interconnect", interconnect, LINKS)
    require_int("world_size", world_size, 1, max(WORLD_SIZES))
    require_finite("bucket_cap_mb", bucket_cap_mb, 0, low_inclusive=False)
    require_int("batch_size", batch_size, 1)
    require_bool("overlap", overlap)
    require_bool("pass_cap", pass_cap)
    require_bool("first_iteration", first_iteration)
    cap = bucket_cap_mb if pass_cap else DEFAULT_BUCKET_CAP_MB
    first_cap = first_bucket_cap_for(bucket_cap_mb if pass_cap else None)
    workload = get_workload(model)
    cfg = DDPConfig(batch_size=batch_size, bucket_cap_mb=cap, first_bucket_cap_mb=first_cap,
                    overlap=overlap, first_iteration=first_iteration,
                    dtype="fp32" if DEVICES[device].kind == "cpu" else "bf16")
    cluster = cluster_for(device, interconnect, world_size)
    trace = simulate(workload, cluster, cfg)
    b = step_result(trace)
    sweep = [n for n in WORLD_SIZES if n <= max(8, world_size)]
    points = scaling(workload, cluster_for(device, interconnect, max(sweep)), cfg, sweep)
    n_buckets = len(buckets_of(trace))
    text = (f"simulated, N={world_size}: step {b.step_s * 1e3:.2f} ms = compute "
            f"{b.compute_s * 1e3:.2f} ms + exposed comm {b.exposed_comm_s * 1e3:.2f} ms; "
            f"comm {b.comm_s * 1e3:.2f} ms in {n_buckets} bucket"
            f"{'s' if n_buckets != 1 else ''}, {b.overlap_fraction:.0%} hidden; "
            f"scaling efficiency {b.scaling_efficiency:.0%}; caps {cap:g} MiB, first bucket "
            f"{first_cap:g} MiB ({'bucket_cap_mb passed' if pass_cap else 'torch defaults'})"
            + ("; first iteration: one bucket of every gradient" if first_iteration else ""))
    title = f"{workload.name} on {cluster.name}"
    return [timeline(trace, title, devices=[0], streams=("compute", "comm"), lanes=True,
                     step_time=True),
            scaling_figure(points, title=f"Scaling over {interconnect} (simulated)"), text]


def ddp_explorer(model: str = "gpt2-124m", device: str = "h100-80gb",
                 interconnect: str = INFINIBAND_NDR.name) -> widgets.VBox:
    """The dashboard: every control redraws the timeline and the scaling sweep."""
    require_choice("model", model, PRESETS)
    require_choice("device", device, DEVICES)
    require_choice("interconnect", interconnect, LINKS)
    controls = {
        "model": widgets.Dropdown(options=list(PRESETS), value=model, description="model"),
        "device": widgets.Dropdown(options=list(DEVICES), value=device, description="device"),
        "interconnect": widgets.Dropdown(options=list(LINKS), value=interconnect,
                                         description="link"),
        "world_size": widgets.SelectionSlider(options=list(WORLD_SIZES), value=8,
                                              description="N"),
        "bucket_cap_mb": widgets.FloatLogSlider(value=25.0, base=2, min=-2,
                                                max=math.log2(512), step=0.5,
                                                description="bucket MiB"),
        "batch_size": widgets.IntSlider(value=8, min=1, max=64, description="batch/rank"),
        "overlap": widgets.Checkbox(value=True, description="overlap with backward"),
        "pass_cap": widgets.Checkbox(value=False, description="pass bucket_cap_mb"),
        "first_iteration": widgets.Checkbox(value=False, description="first iteration"),
    }
    return dashboard(controls, explore)
