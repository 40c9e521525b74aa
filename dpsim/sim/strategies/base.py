"""What every strategy is: the `Strategy` base class and the typed `StepResult`.

A strategy (single device, DataParallel, DDP, FSDP / ZeRO, ...) simulates one training
step into a `Trace` (its private state typed in `Trace.state`) and turns its own trace
into a `StepResult`; the planner, the figures and the dashboards read only that result
and the planner-level facts below, so adding a strategy means one `Strategy` subclass
(its config, `simulate`, `step_result`) and one line in `registry.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Annotated, Generic, TypeVar

from dpsim.sim.checks import Int, OneOf, Real, check_fields
from dpsim.sim.cost.memory import precision_dtype
from dpsim.sim.hardware import Cluster
from dpsim.sim.limits import MAX_ALPHA_TERMS, MAX_TRANSFERS
from dpsim.sim.trace import Trace
from dpsim.sim.workload import Workload

ConfigT = TypeVar("ConfigT")
# ring latencies of one collective per extra device (`collectives.cost`: 2(N-1), (N-1))
LATENCIES_PER_COLLECTIVE = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}
Time = Annotated[float, Real(0)]  # seconds of a step's part, finite
PEAK_BYTES = Int(0)  # one device's peak in StepResult.peak_bytes
_PLAIN, _INF = (int, float), float("inf")  # exact types of a time that take the fast path


@dataclass(frozen=True)
class StepResult:
    """One training step on the busiest device, split into its parts (seconds, bytes)."""

    step_s: Time  # the whole step
    compute_s: Time  # forward + backward + optimizer (busy time of the compute stream)
    hidden_comm_s: Time  # communication that ran while compute ran
    exposed_comm_s: Time  # communication the step waited for
    other_s: Time  # remaining host time (DP: Python threads, GIL, gathers on device 0)
    peak_bytes: tuple[int, ...]  # peak memory per device, index = device
    sent_bytes_per_device: Annotated[int, Int(0)]  # bytes one device sends per step
    batch_per_device: Annotated[int, Int(0)]  # largest local batch (0: not recorded, measured)
    n_devices: Annotated[int, Int(1)]

    def __post_init__(self) -> None:
        if not self._plain():  # the common case (a strategy's own result) returns True
            check_fields(self)
            if not isinstance(self.peak_bytes, tuple):
                raise ValueError(f"peak_bytes={self.peak_bytes!r} is not a tuple; allowed: a "
                                 "tuple of bytes, one per device")
            for nbytes in self.peak_bytes:
                PEAK_BYTES("peak_bytes", nbytes)
        if len(self.peak_bytes) != self.n_devices:
            raise ValueError(f"peak_bytes has {len(self.peak_bytes)} entries for n_devices="
                             f"{self.n_devices}; allowed: one per device")

    def _plain(self) -> bool:
        """Every field plain and in range, tested inline (no call into sim/checks.py)."""
        times = (self.step_s, self.compute_s, self.hidden_comm_s, self.exposed_comm_s,
                 self.other_s)
        if not (all(type(t) in _PLAIN and 0 <= t < _INF for t in times)
                and type(self.sent_bytes_per_device) is int and self.sent_bytes_per_device >= 0
                and type(self.batch_per_device) is int and self.batch_per_device >= 0
                and type(self.n_devices) is int and self.n_devices >= 1
                and type(self.peak_bytes) is tuple):
            return False
        try:
            distinct = set(self.peak_bytes)  # n_devices copies of one value when all are equal
        except TypeError:  # an unhashable entry: not plain
            return False
        return all(type(b) is int and b >= 0 for b in distinct)

    @property
    def comm_s(self) -> float:
        """All communication of the step: hidden + exposed (seconds)."""
        return self.hidden_comm_s + self.exposed_comm_s

    @property
    def overlap_fraction(self) -> float:
        """Share of communication hidden behind compute (1.0 when there is none)."""
        return self.hidden_comm_s / self.comm_s if self.comm_s > 0 else 1.0

    @property
    def scaling_efficiency(self) -> float:
        """Throughput per device relative to the same step without communication."""
        return self.compute_s / self.step_s if self.step_s > 0 else 1.0


@dataclass(frozen=True)
class Placement:
    """Where a strategy keeps the training state (for the side-by-side table)."""

    replicated: str  # held whole on every device
    sharded: str  # split across the devices
    use_when: str  # when to choose this strategy

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class CrossoverTerms:
    """The closed form c0 + c*G/N = k*S/B + A*alpha*N for one strategy and workload."""

    # k: model-sized transfers per step (2 all-reduce, 3 ZeRO-3)
    model_transfers: Annotated[float, Real(0, MAX_TRANSFERS, low_inclusive=False)]
    alpha_terms: Annotated[int, Int(0, MAX_ALPHA_TERMS)]  # A: latencies per step per extra device
    forward_covered: bool  # True: communication also hides behind forward compute
    # whose ring latencies A counts (2 per all-reduce, else 1)
    collective: Annotated[str, OneOf(tuple(LATENCIES_PER_COLLECTIVE))] = "all_reduce"

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def collectives(self) -> int:
        """C: collectives per step (A over the ring latencies of one per extra device)."""
        return -(-self.alpha_terms // LATENCIES_PER_COLLECTIVE[self.collective])


class Strategy(ABC, Generic[ConfigT]):
    """A way of training on n devices, as the planner sees it.

    A new strategy subclasses this and writes its `config_type` (a frozen config
    dataclass), `simulate`, `step_result` and the three table members `name`, `label`,
    `placement`; every other member has a default that fits most strategies.
    """

    name: str  # registry key, e.g. "ddp"
    label: str  # name shown to people, e.g. "ZeRO-1 (optimizer state sharded)"
    placement: Placement  # what is replicated, what is sharded, when to use it
    config_type: type[ConfigT]  # the config class `simulate` takes
    single_node: bool = False  # True when one process drives every device (DP)
    max_devices: int | None = None  # most devices it uses (1: one device); None: no limit
    default_precision: str = "mixed"  # the planner's precision when given "default"

    def split_batch(self, n_devices: int, global_batch: int) -> int:
        """Samples on the busiest device: the same on every device by default;
        ValueError when the batch does not split."""
        return split_evenly(n_devices, global_batch)

    def make_config(self, batch_per_device: int, global_batch: int, n_devices: int,
                    optimizer: str, precision: str) -> ConfigT:
        """The config of one planner step ("fp32" or "mixed" precision), built from the
        config type's fields: batch_size=batch_per_device, optimizer, and the precision as
        the config takes it (a `precision` field, or `dtype` and maybe `mixed_precision`)."""
        takes = set(getattr(self.config_type, "__dataclass_fields__", ()))
        kwargs: dict[str, object] = {"batch_size": batch_per_device, "optimizer": optimizer}
        if "precision" in takes:
            kwargs["precision"] = precision
        else:
            kwargs["dtype"] = precision_dtype(precision)
            if "mixed_precision" in takes:
                kwargs["mixed_precision"] = precision == "mixed"
        return self.config_type(**kwargs)

    @abstractmethod
    def simulate(self, workload: Workload, cluster: Cluster, config: ConfigT) -> Trace:
        """One simulated step on `cluster` (single device: on its device); its typed state
        rides in `Trace.state`."""

    @abstractmethod
    def step_result(self, trace: Trace) -> StepResult:
        """The step split of a trace this strategy simulated."""

    def crossover_terms(self, workload: Workload, dtype: str) -> CrossoverTerms | None:
        """The crossover formula's terms; None (the default): no closed form here."""
        return None


def split_evenly(n_devices: int, global_batch: int) -> int:
    """Samples per device when every device gets the same number; ValueError otherwise."""
    if global_batch % n_devices:
        raise ValueError(f"global_batch={global_batch} does not split over n_devices="
                         f"{n_devices}; allowed: a multiple of {n_devices}")
    return global_batch // n_devices

