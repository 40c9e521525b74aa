"""The planner: step split, scaling curves, the crossover formula, the dashboard."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from dpsim.sim import (
    CLUSTERS,
    crossover,
    efficiencies,
    get_workload,
    plan,
    scaling_curve,
    summary_table,
)
from dpsim.sim import strategy_names as names

CLUSTER = CLUSTERS["h100-ib-128"]


@pytest.fixture(scope="module")
def gpt2():  # type: ignore[no-untyped-def]
    return get_workload("gpt2-124m")


@pytest.mark.parametrize("strategy", names())
def test_step_splits_into_its_parts(gpt2, strategy: str) -> None:  # type: ignore[no-untyped-def]
    n = 1 if strategy == "single" else 4
    p = plan(gpt2, CLUSTER, strategy, n, 32)
    assert p.step_s == pytest.approx(p.compute_s + p.exposed_comm_s + p.other_s, rel=1e-6)
    assert min(p.compute_s, p.hidden_comm_s, p.exposed_comm_s, p.other_s) >= 0
    assert len(p.peak_bytes) == n
    assert p.samples_per_s == pytest.approx(32 / p.step_s)
    assert 0 < p.scaling_efficiency <= 1


def test_memory_shrinks_with_each_zero_stage(gpt2) -> None:  # type: ignore[no-untyped-def]
    peaks = [max(plan(gpt2, CLUSTER, s, 8, 64).peak_bytes) for s in ("ddp", "zero1", "fsdp")]
    assert peaks[0] > peaks[1] > peaks[2]


def test_oom_is_flagged_and_sharding_fixes_it() -> None:
    w = get_workload("llama-7b")
    assert plan(w, CLUSTER, "single", 1, 1).oom_devices == [0]
    assert plan(w, CLUSTER, "ddp", 64, 64).oom_devices == list(range(64))
    assert plan(w, CLUSTER, "fsdp", 64, 64).fits


def test_dp_device0_is_the_heaviest(gpt2) -> None:  # type: ignore[no-untyped-def]
    p = plan(gpt2, CLUSTER, "dp", 4, 64)
    assert p.peak_bytes[0] == max(p.peak_bytes) > min(p.peak_bytes)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_strong_scaling_monotone_where_theory_says(gpt2, strategy: str) -> None:  # type: ignore[no-untyped-def]
    curve = scaling_curve(gpt2, CLUSTER, strategy, 1024, mode="strong")
    assert [p.n_devices for p in curve] == [2**k for k in range(11)]
    comp = [p.compute_s for p in curve]
    assert all(a >= b for a, b in pairwise(comp))  # less work per device
    comm = [p.hidden_comm_s + p.exposed_comm_s for p in curve]
    assert all(a <= b * (1 + 1e-9) for a, b in pairwise(comm))  # never less traffic
    effs = efficiencies(curve, "strong")
    assert all(a >= b - 1e-9 for a, b in pairwise(effs))
    assert effs[0] == 1.0
    assert effs[-1] < 0.5


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_weak_scaling_monotone(gpt2, strategy: str) -> None:  # type: ignore[no-untyped-def]
    curve = scaling_curve(gpt2, CLUSTER, strategy, 8, mode="weak")
    exposed = [p.exposed_comm_s for p in curve]
    assert all(a <= b * (1 + 1e-9) for a, b in pairwise(exposed))
    thr = [p.samples_per_s for p in curve]
    assert all(a <= b for a, b in pairwise(thr))  # more devices never fewer samples/s
    comp = [p.compute_s for p in curve]
    if strategy == "ddp":  # same local batch, same compute: efficiency can only fall
        assert max(comp) == pytest.approx(min(comp))
        effs = efficiencies(curve, "weak")
        assert all(a >= b - 1e-9 for a, b in pairwise(effs))
    else:  # ZeRO shards the optimizer step: compute per device falls with N
        assert all(a >= b for a, b in pairwise(comp))


@pytest.mark.parametrize("model", ["gpt2-124m", "resnet50", "llama-7b"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_crossover_formula_matches_simulation(model: str, strategy: str) -> None:
    cr = crossover(get_workload(model), CLUSTER, strategy, 1024)
    if cr.simulated_devices is None:  # past the curve's 1024 devices: so must the formula be
        assert cr.formula_devices > 1024
        return
    # the simulated crossover is the first power of two at or past the formula's N*
    # (10% slack: the formula fits compute as a line in the batch, the roofline is not one)
    assert cr.simulated_devices / 2 * 0.9 < cr.formula_devices <= cr.simulated_devices * 1.1
    assert "N* =" in cr.formula


def test_summary_table_numbers_are_computed(gpt2) -> None:  # type: ignore[no-untyped-def]
    # the same dtype on both sides: ZeRO-3 moves 3 model sizes, DDP 2 (1.5x)
    same: dict[object, dict[str, Any]] = {
        r["strategy"]: r for r in summary_table(gpt2, CLUSTER, precision="mixed")}
    assert same["FSDP / ZeRO-3"]["traffic_GB_per_device"] == pytest.approx(
        1.5 * same["DDP"]["traffic_GB_per_device"], rel=0.01)
    # the defaults: FSDP keeps torch's scheme (bf16 all-gathers, fp32 reduce-scatter:
    # 1 + 1 + 2 bf16 model sizes), DDP "mixed" (bf16 all-reduce: 2), so 2x
    rows: dict[object, dict[str, Any]] = {r["strategy"]: r for r in summary_table(gpt2, CLUSTER)}
    assert rows["FSDP / ZeRO-3"]["traffic_GB_per_device"] == pytest.approx(
        2.0 * rows["DDP"]["traffic_GB_per_device"], rel=0.01)
    assert rows["single device"]["traffic_GB_per_device"] == 0
    assert rows["FSDP / ZeRO-3"]["memory_GiB_per_device"] < rows["DDP"]["memory_GiB_per_device"]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"strategy": "tp"}, "strategy"),
    ({"n_devices": 0}, "n_devices"),
    ({"n_devices": 2048}, "n_devices"),
    ({"global_batch": 30}, "global_batch"),
    ({"strategy": "single"}, "n_devices"),
    ({"strategy": "dp", "n_devices": 16, "global_batch": 64}, "n_devices"),
    ({"precision": "int8"}, "precision"),
    ({"precision": "bf16"}, "precision"),
])
def test_bad_input_names_the_field(gpt2, kwargs: dict, field: str) -> None:  # type: ignore[no-untyped-def]
    args = {"strategy": "ddp", "n_devices": 8, "global_batch": 64, **kwargs}
    precision = args.pop("precision", "mixed")
    with pytest.raises(ValueError, match=field):
        plan(gpt2, CLUSTER, args["strategy"], args["n_devices"], args["global_batch"],
             precision=precision)


def test_bad_scaling_input(gpt2) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="mode"):
        scaling_curve(gpt2, CLUSTER, "ddp", 64, mode="sideways")
    for strategy in ("dp", "zero1", "single"):
        with pytest.raises(ValueError, match=r"strategy=.*allowed: 'ddp', 'fsdp'$"):
            crossover(gpt2, CLUSTER, strategy, 64)
    with pytest.raises(ValueError, match=r"^strategy='tp' is not known"):
        crossover(gpt2, CLUSTER, "tp", 64)
    with pytest.raises(ValueError, match=r"^n_devices=\[\] has 0 values"):
        scaling_curve(gpt2, CLUSTER, "ddp", 64, n_devices=[])
    with pytest.raises(ValueError, match=r"^batch=16385 is out of range"):  # x 1024 > 2**24
        scaling_curve(gpt2, CLUSTER, "ddp", 16385, mode="weak", n_devices=[1, 1024])
    with pytest.raises(ValueError, match=r"^curve=\[\] has 0 values"):
        efficiencies([])
    with pytest.raises(ValueError, match=r"^strategies\[1\]='tp' is not known"):
        summary_table(gpt2, CLUSTER, strategies=["ddp", "tp"])


def test_dashboard_renders_and_reports_bad_settings() -> None:
    from dpsim.widgets.strategy_dashboard import StrategyExplorer, strategy_dashboard

    ex = StrategyExplorer()
    fig, text = ex.render("resnet50", "h100-node", "fsdp", 8, 64, "mixed")
    assert "simulated" in text
    assert len(fig.data) >= 6
    (msg,) = ex.render("resnet50", "h100-node", "ddp", 8, 4, "mixed")
    assert "global_batch" in msg
    (msg,) = ex.render("resnet50", "this-machine", "dp", 4, 64, "mixed")
    assert "n_devices" in msg
    assert strategy_dashboard(model="resnet50", cluster="pcie-4gpu", n_devices=4) is not None
