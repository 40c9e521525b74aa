"""One timeline format for simulated and measured runs.

A Trace holds events (what ran where and when) and memory samples (how many bytes of
each category a device held at a time). Times are seconds from the start of the step.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from dpsim.validation import require_choice

SOURCES = ("simulated", "measured")


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


@dataclass
class Trace:
    """Events and memory samples of one run, simulated or measured."""

    source: str = "simulated"  # "simulated" or "measured"
    events: list[Event] = field(default_factory=list)
    memory: list[MemorySample] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_choice("source", self.source, SOURCES)

    # --- building ----------------------------------------------------------------------
    def add(self, event: Event) -> Event:
        """Append an event and return it."""
        self.events.append(event)
        return event

    def sample(self, device: int, time_s: float, category: str, nbytes: int) -> None:
        """Record that `device` holds `nbytes` of `category` from `time_s` on."""
        self.memory.append(MemorySample(device, time_s, category, int(nbytes)))

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
        return [
            e
            for e in self.events
            if (device is None or e.device == device)
            and (stream is None or e.stream == stream)
            and (kind is None or e.kind == kind)
        ]

    def busy_s(self, device: int, stream: str) -> float:
        """Seconds in which `stream` on `device` has at least one event (overlaps merged)."""
        spans = sorted((e.start_s, e.end_s) for e in self.filter(device=device, stream=stream))
        return _union_length(spans)

    def memory_timeline(self, device: int) -> list[tuple[float, dict[str, int]]]:
        """(time_s, bytes per category) after each change on `device`, in time order."""
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
        out: dict[str, float] = defaultdict(float)
        for e in self.filter(device=device):
            out[e.kind] += e.duration_s
        return dict(out)

    # --- serialising -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "source": self.source,
            "meta": self.meta,
            "events": [asdict(e) for e in self.events],
            "memory": [asdict(m) for m in self.memory],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """Inverse of to_dict."""
        return cls(
            source=data.get("source", "simulated"),
            events=[Event(**e) for e in data.get("events", [])],
            memory=[MemorySample(**m) for m in data.get("memory", [])],
            meta=dict(data.get("meta", {})),
        )


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
