"""One timeline format for simulated and measured runs.

A Trace holds events (what ran where and when) and memory samples (how many bytes of
each category a device held at a time). Times are seconds from the start of the step.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from dpsim.sim.checks import require_choice, require_finite, require_int, require_type, within
from dpsim.sim.limits import MAX_DEVICE, MAX_SECONDS, MAX_TOTAL_BYTES

T = TypeVar("T")
_PLAIN = (int, float)  # exact types of a time that take the fast path (not bool)
SOURCES = ("simulated", "measured", "re-enacted")  # re-enacted: real torch ops, stand-in devices
# Times are seconds from the start of the step, 0..MAX_SECONDS; bytes 0..MAX_TOTAL_BYTES.


@dataclass(frozen=True)
class Event:
    """One interval of work on one device and stream."""

    device: int  # rank or device index
    stream: str  # "compute", "comm", "python", ...
    kind: str  # "forward", "backward", "optimizer", "all_reduce", "scatter", ...
    start_s: float
    end_s: float
    nbytes: int = 0  # bytes moved (communication) or touched
    label: str = ""  # e.g. the layer or bucket name

    def __post_init__(self) -> None:
        if (type(self.device) is int and 0 <= self.device <= MAX_DEVICE
                and type(self.stream) is str and type(self.kind) is str
                and type(self.label) is str and type(self.nbytes) is int
                and 0 <= self.nbytes <= MAX_TOTAL_BYTES and type(self.start_s) in _PLAIN
                and type(self.end_s) in _PLAIN and 0 <= self.start_s <= self.end_s <= MAX_SECONDS):
            return  # the common case: every field plain and in range
        require_int("device", self.device, 0, MAX_DEVICE)
        require_type("stream", self.stream, str)
        require_type("kind", self.kind, str)
        require_finite("start_s", self.start_s, 0, MAX_SECONDS)
        require_finite("end_s", self.end_s, 0, MAX_SECONDS)
        require_int("nbytes", self.nbytes, 0, MAX_TOTAL_BYTES)
        require_type("label", self.label, str)
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

    device: int
    time_s: float
    category: str  # "parameters", "gradients", "optimizer", "activations", ...
    nbytes: int

    def __post_init__(self) -> None:
        if (type(self.device) is int and 0 <= self.device <= MAX_DEVICE
                and type(self.category) is str and type(self.nbytes) is int
                and 0 <= self.nbytes <= MAX_TOTAL_BYTES and type(self.time_s) in _PLAIN
                and 0 <= self.time_s <= MAX_SECONDS):
            return  # the common case
        require_int("device", self.device, 0, MAX_DEVICE)
        require_finite("time_s", self.time_s, 0, MAX_SECONDS)
        require_type("category", self.category, str)
        require_int("nbytes", self.nbytes, 0, MAX_TOTAL_BYTES)


@dataclass(frozen=True)
class SimState:
    """Base of what a simulator knows about its step beyond events and memory samples.

    A strategy's `simulate` attaches its own frozen subclass to the trace (`Trace.state`)
    and its `step_result` and summaries read it back, typed. Not serialised by `to_dict`.
    """


@dataclass
class Trace:
    """Events and memory samples of one run, simulated or measured."""

    source: str = "simulated"  # one of SOURCES
    events: list[Event] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # labels of the run (strategy, workload)
    state: SimState | None = None  # the simulator's typed state (None: measured or loaded)

    def __post_init__(self) -> None:
        require_choice("source", self.source, SOURCES)
        require_type("events", self.events, list)
        for i, event in enumerate(self.events):
            require_type(f"events[{i}]", event, Event)
        require_type("memory", self.memory, list)
        for i, sample in enumerate(self.memory):
            require_type(f"memory[{i}]", sample, MemorySample)
        require_type("meta", self.meta, dict)
        if self.state is not None:
            require_type("state", self.state, SimState)

    # --- building ----------------------------------------------------------------------
    def add(self, event: Event) -> Event:
        """Append an event and return it."""
        if type(event) is not Event:
            require_type("event", event, Event)
        self.events.append(event)
        return event

    def sample(self, device: int, time_s: float, category: str, nbytes: float) -> None:
        """Record that `device` holds `nbytes` of `category` from `time_s` on (a float is
        truncated to whole bytes)."""
        if isinstance(nbytes, float):
            nbytes = int(require_finite("nbytes", nbytes, 0, MAX_TOTAL_BYTES))
        elif not isinstance(nbytes, (bool, int)):
            with suppress(TypeError):  # numpy and torch integers become ints, as int() did
                nbytes = operator.index(nbytes)
        self.memory.append(MemorySample(device, time_s, category, nbytes))

    # --- reading -----------------------------------------------------------------------
    @property
    def devices(self) -> list[int]:
        """Devices that appear in events or memory samples, sorted."""
        return sorted({e.device for e in self.events} | {m.device for m in self.memory})

    @property
    def end_s(self) -> float:
        """Time of the last event end (0 for an empty trace)."""
        return max((e.end_s for e in self.events), default=0.0)

    def filter(
        self, device: int | None = None, stream: str | None = None, kind: str | None = None
    ) -> list[Event]:
        """Events matching every given field."""
        _query(device, stream=stream, kind=kind)
        return self._filter(device, stream, kind)

    def _filter(self, device: int | None, stream: str | None = None,
                kind: str | None = None) -> list[Event]:
        return [
            e
            for e in self.events
            if (device is None or e.device == device)
            and (stream is None or e.stream == stream)
            and (kind is None or e.kind == kind)
        ]

    def busy_s(self, device: int, stream: str) -> float:
        """Seconds in which `stream` on `device` has at least one event (overlaps merged)."""
        _query(device, required=True)
        require_type("stream", stream, str)
        spans = sorted((e.start_s, e.end_s) for e in self._filter(device, stream))
        return _union_length(spans)

    def memory_timeline(self, device: int) -> list[tuple[float, dict[str, int]]]:
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

    def totals_by_kind(self, device: int | None = None) -> dict[str, float]:
        """Seconds of events per kind (not overlap-merged)."""
        _query(device)
        out: dict[str, float] = defaultdict(float)
        for e in self._filter(device):
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
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of to_dict."""
        require_type("data", data, dict)
        return cls(
            source=require_choice("data['source']", data.get("source", "simulated"), SOURCES),
            events=_rebuild(Event, "data['events']", data.get("events", [])),
            memory=_rebuild(MemorySample, "data['memory']", data.get("memory", [])),
            meta=dict(require_type("data['meta']", data.get("meta", {}), dict)),
        )


def _rebuild(cls: type[T], key: str, rows: object) -> list[T]:
    """Events or memory samples from the dicts of `to_dict`, each error naming its row."""
    checked: list[Any] = require_type(key, rows, list)  # type: ignore[arg-type]
    out = []
    for i, row in enumerate(checked):
        require_type(f"{key}[{i}]", row, dict)
        try:
            with within(f"{key}[{i}]"):
                out.append(cls(**row))
        except TypeError:
            names = ", ".join(f.name for f in fields(cls))  # type: ignore[arg-type]
            raise ValueError(f"{key}[{i}]={row!r} does not have the fields of a "
                             f"{cls.__name__}; allowed: {names}") from None
    return out


def _query(device: int | None, *, required: bool = False, **names: str | None) -> None:
    """Check the arguments of a reading method: a device index, stream and kind names."""
    if device is not None or required:
        require_int("device", device, 0, MAX_DEVICE)  # type: ignore[arg-type]
    for key, name in names.items():
        if name is not None:
            require_type(key, name, str)


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
