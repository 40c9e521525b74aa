"""One timeline format for simulated and measured runs.

A Trace holds events (what ran where and when) and memory samples (how many bytes of
each category a device held at a time). Times are seconds from the start of the step.
"""

from __future__ import annotations

import operator
import reprlib
from collections import defaultdict
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any, TypeVar

from dpsim.sim.checks import Each, Instance, Int, OneOf, check_fields, checked, within
from dpsim.sim.limits import (
    MAX_COUNT,
    MAX_DEVICE,
    MAX_SECONDS,
    MAX_TOTAL_BYTES,
    DeviceIndex,
    Seconds,
    TotalBytes,
)

T = TypeVar("T")
_PLAIN = (int, float)  # exact types of a time that take the fast path (not bool)
SOURCES = ("simulated", "measured", "re-enacted")  # re-enacted: real torch ops, stand-in devices
# Times are seconds from the start of the step, 0..MAX_SECONDS; bytes 0..MAX_TOTAL_BYTES.


@dataclass(frozen=True)
class Event:
    """One interval of work on one device and stream."""

    device: DeviceIndex  # rank or device index
    stream: str  # "compute", "comm", "python", ...
    kind: str  # "forward", "backward", "optimizer", "all_reduce", "scatter", ...
    start_s: Seconds
    end_s: Seconds
    nbytes: TotalBytes = 0  # bytes moved (communication) or touched
    label: str = ""  # e.g. the layer or bucket name

    def __post_init__(self) -> None:
        if (type(self.device) is int and 0 <= self.device <= MAX_DEVICE
                and type(self.stream) is str and type(self.kind) is str
                and type(self.label) is str and type(self.nbytes) is int
                and 0 <= self.nbytes <= MAX_TOTAL_BYTES and type(self.start_s) in _PLAIN
                and type(self.end_s) in _PLAIN and 0 <= self.start_s <= self.end_s <= MAX_SECONDS):
            return  # the common case: every field plain and in range
        check_fields(self)
        if self.end_s < self.start_s:
            raise ValueError(
                f"end_s={self.end_s} is before start_s={self.start_s}; allowed: end_s >= start_s"
            )

    @property
    def duration_s(self) -> float:
        """Length of the interval in seconds."""
        return self.end_s - self.start_s


@dataclass(frozen=True)
class MemorySample:
    """Bytes of one category held by one device from `time_s` on."""

    device: DeviceIndex
    time_s: Seconds
    category: str  # "parameters", "gradients", "optimizer", "activations", ...
    nbytes: TotalBytes

    def __post_init__(self) -> None:
        if (type(self.device) is int and 0 <= self.device <= MAX_DEVICE
                and type(self.category) is str and type(self.nbytes) is int
                and 0 <= self.nbytes <= MAX_TOTAL_BYTES and type(self.time_s) in _PLAIN
                and 0 <= self.time_s <= MAX_SECONDS):
            return  # the common case
        check_fields(self)


@dataclass(frozen=True)
class SimState:
    """Base of what a simulator knows about its step beyond events and memory samples.

    A strategy's `simulate` attaches its own frozen subclass to the trace (`Trace.state`)
    and its `step_result` and summaries read it back, typed. Not serialised by `to_dict`.
    """


@dataclass
class Trace:
    """Events and memory samples of one run, simulated or measured."""

    source: Annotated[str, OneOf(SOURCES)] = "simulated"  # one of SOURCES
    events: Annotated[list[Event], Each(Instance(Event), 0, MAX_COUNT)] = field(
        default_factory=list)
    memory: Annotated[list[MemorySample], Each(Instance(MemorySample), 0, MAX_COUNT)] = field(
        default_factory=list)
    # labels of the run (strategy, workload)
    meta: Annotated[dict[str, Any], Instance(dict)] = field(default_factory=dict)
    state: SimState | None = None  # the simulator's typed state (None: measured or loaded)

    def __post_init__(self) -> None:
        if (type(self.source) is str and self.source in SOURCES
                and type(self.events) is list and type(self.memory) is list
                and type(self.meta) is dict
                and (self.state is None or isinstance(self.state, SimState))
                and all(type(e) is Event for e in self.events)
                and all(type(m) is MemorySample for m in self.memory)):
            return  # the common case (every simulation starts an empty trace)
        check_fields(self)
        for name in ("events", "memory"):  # add and sample append to them
            if not isinstance(getattr(self, name), list):
                raise ValueError(f"{name}={reprlib.repr(getattr(self, name))} is not a list; "
                                 "give a list")

    # --- building ----------------------------------------------------------------------
    def add(self, event: Event) -> Event:
        """Append an event and return it."""
        if type(event) is not Event:  # the common case skips the check
            Instance(Event)("event", event)
        self.events.append(event)
        return event

    def sample(self, device: int, time_s: float, category: str, nbytes: float) -> None:
        """Record that `device` holds `nbytes` of `category` from `time_s` on (a float is
        truncated to whole bytes; MemorySample checks each field)."""
        if isinstance(nbytes, float):
            if 0 <= nbytes <= MAX_TOTAL_BYTES:
                nbytes = int(nbytes)
        elif not isinstance(nbytes, (bool, int)):
            with suppress(TypeError):  # numpy and torch integers become ints, as int() did
                nbytes = operator.index(nbytes)
        self.memory.append(MemorySample(device, time_s, category, nbytes))  # type: ignore[arg-type]

    # --- reading -----------------------------------------------------------------------
    @property
    def devices(self) -> list[int]:
        """Devices that appear in events or memory samples, sorted."""
        return sorted({e.device for e in self.events} | {m.device for m in self.memory})

    @property
    def end_s(self) -> float:
        """Time of the last event end (0 for an empty trace)."""
        return max((e.end_s for e in self.events), default=0.0)

    def filter(self, device: DeviceIndex | None = None, stream: str | None = None,
               kind: str | None = None) -> list[Event]:
        """Events matching every given field."""
        _query(device, stream=stream, kind=kind)
        return [
            e
            for e in self.events
            if (device is None or e.device == device)
            and (stream is None or e.stream == stream)
            and (kind is None or e.kind == kind)
        ]

    def busy_s(self, device: DeviceIndex, stream: str) -> float:
        """Seconds in which `stream` on `device` has at least one event (overlaps merged)."""
        _query(device, required=True, stream=stream)
        spans = sorted((e.start_s, e.end_s) for e in self.filter(device, stream))
        return _union_length(spans)

    def memory_timeline(self, device: DeviceIndex) -> list[tuple[float, dict[str, int]]]:
        """(time_s, bytes per category) after each change on `device`, in time order."""
        _query(device, required=True)
        current: dict[str, int] = {}
        out: list[tuple[float, dict[str, int]]] = []
        for m in sorted((m for m in self.memory if m.device == device), key=lambda m: m.time_s):
            current[m.category] = m.nbytes
            if out and out[-1][0] == m.time_s:
                out[-1] = (m.time_s, dict(current))
            else:
                out.append((m.time_s, dict(current)))
        return out

    def peak_memory(self, device: int) -> int:
        """Largest total bytes `device` held at any sampled time."""
        return max((sum(c.values()) for _, c in self.memory_timeline(device)), default=0)

    def memory_at_peak(self, device: int) -> dict[str, int]:
        """Bytes per category at the moment of `device`'s peak."""
        timeline = self.memory_timeline(device)
        if not timeline:
            return {}
        return dict(max(timeline, key=lambda tc: sum(tc[1].values()))[1])

    def totals_by_kind(self, device: DeviceIndex | None = None) -> dict[str, float]:
        """Seconds of events per kind (not overlap-merged)."""
        _query(device)
        out: dict[str, float] = defaultdict(float)
        for e in self.filter(device):
            out[e.kind] += e.duration_s
        return dict(out)

    # --- serialising -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without `state`, which only the simulator that made it reads)."""
        return {
            "source": self.source,
            "meta": self.meta,
            "events": [asdict(e) for e in self.events],
            "memory": [asdict(m) for m in self.memory],
        }

    @classmethod
    @checked
    def from_dict(cls, data: Annotated[dict[str, Any], Instance(dict)]) -> Trace:
        """Inverse of to_dict."""
        events = _rebuild(Event, "data['events']", data.get("events", []))
        memory = _rebuild(MemorySample, "data['memory']", data.get("memory", []))
        meta = data.get("meta", {})
        try:
            return cls(source=data.get("source", "simulated"), events=events, memory=memory,
                       meta=dict(meta) if isinstance(meta, dict) else meta)
        except ValueError as err:  # name the key of `data`: data['source']=...
            key, _, rest = str(err).partition("=")
            raise ValueError(f"data[{key!r}]={rest}") from None


def _rebuild(cls: type[T], key: str, rows: object) -> list[T]:
    """Events or memory samples from the dicts of `to_dict`, each error naming its row."""
    if not isinstance(rows, list):
        raise ValueError(f"{key}={reprlib.repr(rows)} is not a list; give a list of dicts")
    out = []
    for i, row in enumerate(rows):
        try:
            with within(f"{key}[{i}]"):
                out.append(cls(**row))
        except TypeError:
            names = ", ".join(f.name for f in fields(cls))  # type: ignore[arg-type]
            raise ValueError(f"{key}[{i}]={row!r} does not have the fields of a "
                             f"{cls.__name__}; allowed: {names}") from None
    return out


def _query(device: int | None, *, required: bool = False, **names: str | None) -> None:
    """The arguments of a reading method (a device index; stream and kind names), which the
    strategies call per step: a plain test first, the hints' checks only when it fails."""
    if not ((device is None and not required)
            or (type(device) is int and 0 <= device <= MAX_DEVICE)):
        Int(0, MAX_DEVICE)("device", device)
    for key, name in names.items():
        if type(name) is not str and (name is not None or required):
            Instance(str)(key, name)


def _union_length(spans: Iterable[tuple[float, float]]) -> float:
    total = 0.0
    cur_start: float | None = None
    cur_end = 0.0
    for start, end in spans:
        if cur_start is None or start > cur_end:
            if cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_start is not None:
        total += cur_end - cur_start
    return total
