"""The strategy protocol and its registry: every strategy honours it, the planner only uses it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

import pytest

import dpsim.sim as sim
from dpsim.sim.cost.compute import step_compute_s
from dpsim.sim.hardware import CLUSTERS, Cluster
from dpsim.sim.planner import crossover, plan, scaling_curve, summary_table
from dpsim.sim.strategies.base import Placement, StepResult, Strategy
from dpsim.sim.strategies.registry import get_strategy, names, register, unregister
from dpsim.sim.trace import Event, SimState, Trace
from dpsim.sim.workload import Workload, get_workload

CLUSTER = CLUSTERS["h100-ib-128"]
ORDER = ("single", "dp", "ddp", "zero1", "zero2", "fsdp", "hsdp")


@pytest.fixture(scope="module")
def gpt2() -> Workload:
    return get_workload("gpt2-124m")


def _devices(name: str) -> int:
    return get_strategy(name).max_devices or 4


def _own_result(workload: Workload, name: str, n: int, global_batch: int,
                precision: str) -> StepResult:
    s = get_strategy(name)
    b = s.split_batch(n, global_batch)
    config = s.make_config(b, global_batch, n, "adam", precision)
    assert isinstance(config, s.config_type)
    return s.step_result(s.simulate(workload, CLUSTER.with_devices(n), config))


def test_the_registry_lists_the_strategies_in_order() -> None:
    assert names() == ORDER
    assert [get_strategy(n).label for n in ORDER] == [
        "single device", "DataParallel", "DDP", "ZeRO-1 (optimizer state sharded)",
        "ZeRO-2 (gradients sharded too)", "FSDP / ZeRO-3",
        "HSDP (shard in a node, replicate across)"]
    with pytest.raises(ValueError, match=r"^name='tp' is not known; allowed: 'single', "
                                         r"'dp', 'ddp', 'zero1', 'zero2', 'fsdp', 'hsdp'$"):
        sim.get_strategy("tp")  # checked at the face


@pytest.mark.parametrize("name", ORDER)
def test_every_strategy_implements_the_protocol(name: str) -> None:
    s = get_strategy(name)
    assert isinstance(s, Strategy)
    assert s.name == name
    assert s.label
    assert isinstance(s.placement, Placement)
    assert all(
        getattr(s.placement, f.name) for f in fields(Placement))
    assert isinstance(s.single_node, bool)
    assert s.max_devices is None or s.max_devices >= 1


@pytest.mark.parametrize("precision", ["mixed", "fp32"])
@pytest.mark.parametrize("name", ORDER)
def test_step_result_is_consistent(gpt2: Workload, name: str, precision: str) -> None:
    n = _devices(name)
    r = _own_result(gpt2, name, n, 32, precision)
    parts = (r.compute_s, r.hidden_comm_s, r.exposed_comm_s, r.other_s)
    assert min(parts) >= 0
    assert r.step_s >= r.compute_s + r.exposed_comm_s - 1e-9 * r.step_s
    assert r.step_s == pytest.approx(r.compute_s + r.exposed_comm_s + r.other_s, rel=1e-6)
    assert len(r.peak_bytes) == r.n_devices == n
    assert all(isinstance(b, int) and b > 0 for b in r.peak_bytes)
    assert r.batch_per_device == get_strategy(name).split_batch(n, 32)
    assert (r.sent_bytes_per_device == 0) == (n == 1)


@pytest.mark.parametrize("precision", ["mixed", "fp32"])
@pytest.mark.parametrize("name", ORDER)
def test_the_planner_reports_what_the_strategy_says(gpt2: Workload, name: str,
                                                    precision: str) -> None:
    n = _devices(name)
    r = _own_result(gpt2, name, n, 32, precision)
    p = plan(gpt2, CLUSTER, name, n, 32, precision=precision)
    assert (p.strategy, p.label, p.global_batch) == (name, get_strategy(name).label, 32)
    assert (p.n_devices, p.batch_per_device, p.step_s, p.compute_s, p.hidden_comm_s,
            p.exposed_comm_s, p.other_s, p.peak_bytes, p.traffic_bytes_per_device) == (
        r.n_devices, r.batch_per_device, r.step_s, r.compute_s, r.hidden_comm_s,
        r.exposed_comm_s, r.other_s, r.peak_bytes, r.sent_bytes_per_device)


@pytest.mark.parametrize(("name", "n", "batch", "message"), [
    ("single", 2, 8, "^n_devices=2 with strategy='single'; allowed: 1$"),
    ("dp", 4, 3, "^global_batch=3 is out of range for DP on 4 devices; allowed >= 4$"),
    ("ddp", 4, 30, "^global_batch=30 does not split over n_devices=4; allowed: a multiple "
                   "of 4$"),
    ("fsdp", 8, 12, "^global_batch=12 does not split over n_devices=8; allowed: a multiple "
                    "of 8$"),
])
def test_batch_split_errors(name: str, n: int, batch: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        get_strategy(name).split_batch(n, batch)


def test_dp_splits_like_torch_chunk() -> None:
    assert get_strategy("dp").split_batch(4, 10) == 3
    assert get_strategy("single").split_batch(1, 7) == 7
    assert get_strategy("zero2").split_batch(4, 32) == 8


def test_only_ddp_and_zero3_have_a_crossover(gpt2: Workload) -> None:
    terms = {n: get_strategy(n).crossover_terms(gpt2, "bf16") for n in ORDER}
    assert [n for n, t in terms.items() if t is not None] == ["ddp", "fsdp"]
    ddp, zero3 = terms["ddp"], terms["fsdp"]
    assert ddp is not None
    assert zero3 is not None
    assert (ddp.model_transfers, ddp.forward_covered) == (2.0, False)
    assert (zero3.model_transfers, zero3.alpha_terms, zero3.forward_covered) == (
        3.0, 3 * len(gpt2.layers), True)


@pytest.mark.parametrize(("field", "value"), [("step_s", -1.0), ("exposed_comm_s", float("nan")),
                                          ("n_devices", 0), ("batch_per_device", -1),
                                          ("sent_bytes_per_device", -5)])
def test_step_result_rejects_bad_values(field: str, value: float) -> None:
    good = {"step_s": 1.0, "compute_s": 1.0, "hidden_comm_s": 0.0, "exposed_comm_s": 0.0,
            "other_s": 0.0, "peak_bytes": (1,), "sent_bytes_per_device": 0,
            "batch_per_device": 1, "n_devices": 1}
    with pytest.raises(ValueError, match=field):
        StepResult(**{**good, field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="peak_bytes"):
        StepResult(**{**good, "peak_bytes": (1, 2)})  # type: ignore[arg-type]


# --- the extension point: a strategy the planner has never heard of ---------------------------

@dataclass(frozen=True)
class ToyConfig:
    """Data parallel whose communication is free."""

    batch_size: int
    dtype: str
    optimizer: str


@dataclass(frozen=True)
class ToyState(SimState):
    """What the toy's simulate hands to its step_result."""

    n_devices: int
    batch_size: int


class FreeCommunication(Strategy[ToyConfig]):
    """Every device computes its share; gradients arrive at no cost (an upper bound).

    Only what a strategy must write: the base class supplies split_batch (an even split),
    make_config (from ToyConfig's fields), crossover_terms (None) and the planner facts.
    """

    name = "toy"
    label = "toy: free communication"
    placement = Placement("everything", "the batch", "never: it is a test")
    config_type = ToyConfig

    def simulate(self, workload: Workload, cluster: Cluster, config: ToyConfig) -> Trace:
        t = step_compute_s(workload, config.batch_size, cluster.device, config.dtype,
                           config.optimizer)
        trace = Trace("simulated", state=ToyState(cluster.world_size, config.batch_size))
        trace.add(Event(0, "compute", "step", 0.0, t))
        return trace

    def step_result(self, trace: Trace) -> StepResult:
        assert isinstance(trace.state, ToyState)
        n, t = trace.state.n_devices, trace.end_s
        return StepResult(t, t, 0.0, 0.0, 0.0, (1,) * n, 0, trace.state.batch_size, n)


@pytest.fixture
def toy() -> Iterator[FreeCommunication]:
    strategy = FreeCommunication()
    register(strategy)
    try:
        yield strategy
    finally:
        unregister(strategy.name)


def test_a_registered_strategy_reaches_the_planner(gpt2: Workload,
                                                   toy: FreeCommunication) -> None:
    assert names() == (*ORDER, "toy")
    p = plan(gpt2, CLUSTER, "toy", 8, 64)
    assert p.step_s == p.compute_s == p.single_device_s
    assert p.scaling_efficiency == 1.0
    curve = scaling_curve(gpt2, CLUSTER, "toy", 8, mode="weak")
    assert [c.n_devices for c in curve] == [2**k for k in range(11)]
    assert [c.samples_per_s for c in curve] == pytest.approx(
        [curve[0].samples_per_s * c.n_devices for c in curve])
    rows = summary_table(gpt2, CLUSTERS["h100-node"])
    assert rows[-1]["strategy"] == toy.label
    assert rows[-1]["use_when"] == "never: it is a test"
    with pytest.raises(ValueError, match=r"allowed: 'ddp', 'fsdp'$"):
        crossover(gpt2, CLUSTER, "toy", 64)
    with pytest.raises(ValueError, match="already registered"):
        register(FreeCommunication())


def test_an_unregistered_strategy_is_gone(gpt2: Workload) -> None:
    register(FreeCommunication())
    unregister("toy")
    assert names() == ORDER
    with pytest.raises(ValueError, match="strategy='toy' is not known"):
        sim.plan(gpt2, CLUSTER, "toy", 8, 64)
