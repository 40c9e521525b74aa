"""HSDP (dpsim.sim.strategies.fsdp.hsdp): the simulated step against the FSDP paper's traffic
formulas, and its two ends: full sharding (FSDP over every device) and no sharding (DDP-like)."""

from __future__ import annotations

from dataclasses import replace

import pytest

import dpsim.sim as sim
from dpsim.sim.hardware import H100_80GB, INFINIBAND_NDR, NVLINK4, Cluster
from dpsim.sim.strategies import fsdp
from dpsim.sim.strategies.fsdp.hsdp import (
    HSDPConfig,
    hsdp_traffic,
    simulate,
    step_result,
    traffic_of,
)
from dpsim.sim.workload import Layer, Workload
from tests.support.bad_input import raises_naming

CLUSTER = Cluster("4 nodes of 8", H100_80GB, 8, 4, NVLINK4, INFINIBAND_NDR)
N_PARAMS_PER_LAYER = 32 * 1_000_000  # divides by every shard size below: no padding


def uniform(n_layers: int = 4) -> Workload:
    layer = Layer("blk", "Block", N_PARAMS_PER_LAYER, 2, 4_000_000, 1_000_000, 2e10)
    layers = tuple(replace(layer, name=f"blk{i}") for i in range(n_layers))
    # a last unit without parameters (like GPT-2's loss): FSDP keeps the last unit gathered
    # between forward and backward, so the closed form's 3 transfers hold when it is empty
    layers += (Layer("loss", "Loss", 0, 0, 1_000_000, 1_000, 1e6),)
    return Workload("uniform", layers, dtype="bf16", input_bytes=1_000_000, loss_bytes=0)


@pytest.mark.parametrize("shard_size", [1, 2, 8, 16, 32])
def test_simulated_traffic_equals_the_closed_form(shard_size: int) -> None:
    w = uniform()
    t = simulate(w, CLUSTER, HSDPConfig(4, shard_size))
    n_params = 4 * N_PARAMS_PER_LAYER
    expected = hsdp_traffic(n_params, 32, shard_size, 2)
    assert traffic_of(t) == expected
    assert step_result(t).sent_bytes_per_device == expected.total_bytes
    assert expected.mode == {1: "none", 32: "full"}.get(shard_size, "hybrid")


def test_the_formulas_by_hand() -> None:
    m = 1000 * 2  # bytes of 1000 bf16 parameters
    assert hsdp_traffic(1000, 8, 8) == hsdp_traffic(1000, 8, 8, 2)
    assert hsdp_traffic(1000, 8, 8).shard_bytes == 3 * m * 7 // 8  # full: 3(W-1)/W M
    assert hsdp_traffic(1000, 8, 1).replicate_bytes == 2 * m * 7 // 8  # none: 2(W-1)/W M
    hybrid = hsdp_traffic(1000, 8, 4)
    assert (hybrid.shard_bytes, hybrid.replicate_bytes) == (3 * m * 3 // 4, 2 * (m // 4) // 2)
    assert hsdp_traffic(1000, 8, 4, reshard_after_forward=False).shard_bytes == 2 * m * 3 // 4


def test_full_sharding_is_fsdp_and_memory_follows_the_shard_size() -> None:
    w = uniform()
    full = simulate(w, CLUSTER, HSDPConfig(4, 32, precision="bf16"))
    ref = fsdp.simulate(w, CLUSTER, fsdp.FSDPConfig(4, precision="bf16"))
    assert step_result(full).sent_bytes_per_device == fsdp.step_result(ref).sent_bytes_per_device
    assert step_result(full).step_s == pytest.approx(fsdp.step_result(ref).step_s)
    peaks = [step_result(simulate(w, CLUSTER, HSDPConfig(4, f))).peak_bytes[0]
             for f in (1, 8, 32)]
    assert peaks[0] > peaks[1] > peaks[2]  # a larger shard group holds less per device


def test_hybrid_keeps_the_slow_link_for_the_small_all_reduce() -> None:
    """Within a node (F = 8) the all-gathers use NVLink; only 1/8 of the gradients cross
    InfiniBand, so the hybrid step is shorter than full sharding over 32 devices."""
    w = uniform()
    hybrid = step_result(simulate(w, CLUSTER, HSDPConfig(4, 8)))
    full = step_result(simulate(w, CLUSTER, HSDPConfig(4, 32)))
    assert hybrid.step_s < full.step_s
    events = simulate(w, CLUSTER, HSDPConfig(4, 8)).filter(stream="replicate")
    assert events
    assert all(e.kind == "all_reduce" for e in events)


def test_bad_input_names_the_field() -> None:
    """At the face (`dpsim.sim`): inside, the shard size is trusted."""
    with raises_naming("shard_size"):
        sim.hsdp_traffic(10, 8, 3)
    with raises_naming("shard_size"):
        HSDPConfig(4, 0)
    with raises_naming("shard_size"):
        sim.simulate(uniform(), CLUSTER, HSDPConfig(4, 12))  # does not fill whole nodes of 8
    with raises_naming("shard_size"):
        sim.simulate(uniform(), CLUSTER, HSDPConfig(4, 64))  # more than the 32 devices
    with raises_naming("shard_size"):
        sim.hsdp_traffic(10, 8, 16)
    with raises_naming("n_params"):
        sim.hsdp_traffic(-1, 8, 4)
