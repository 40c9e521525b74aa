import math
from collections.abc import Callable

import numpy as np
import pytest

from dpsim.sim.limits import MAX_DEVICE, MAX_SECONDS, MAX_TOTAL_BYTES
from dpsim.sim.trace import Event, MemorySample, Trace
from tests.support.bad_input import raises_naming


def test_busy_time_merges_overlaps_and_peak_memory() -> None:
    tr = Trace("measured")
    tr.add(Event(0, "comm", "all_reduce", 0.0, 2.0))
    tr.add(Event(0, "comm", "all_reduce", 1.0, 3.0))
    tr.add(Event(0, "comm", "all_reduce", 5.0, 6.0))
    assert tr.busy_s(0, "comm") == pytest.approx(4.0)
    tr.sample(0, 0.0, "parameters", 100)
    tr.sample(0, 1.0, "activations", 50)
    tr.sample(0, 2.0, "activations", 0)
    assert tr.peak_memory(0) == 150
    assert tr.memory_at_peak(0) == {"parameters": 100, "activations": 50}
    assert tr.end_s == 6.0


def test_round_trip_and_validation() -> None:
    tr = Trace("simulated", meta={"x": 1})
    tr.add(Event(1, "compute", "forward", 0.0, 0.5, label="l0"))
    tr.sample(1, 0.5, "activations", 10)
    assert Trace.from_dict(tr.to_dict()) == tr
    with pytest.raises(ValueError, match="source='guessed'"):
        Trace("guessed")
    with pytest.raises(ValueError, match="end_s"):
        Event(0, "compute", "forward", 1.0, 0.5)


def test_timeline_draws_rows_lanes_and_step_times() -> None:
    from dpsim.viz.timeline import timeline

    sim = Trace("simulated", events=[Event(0, "compute", "forward", 0.0, 1.0),
                                     Event(1, "compute", "forward", 0.0, 1.0)])
    meas = Trace("measured", events=[Event(0, "compute", "forward", 0.0, 1.5),
                                     Event(0, "comm", "all_reduce", 1.0, 2.0, 64, "b0"),
                                     Event(0, "comm", "all_reduce", 1.5, 2.5, 64, "b1"),
                                     Event(1, "comm", "all_reduce", 1.0, 2.0, 64, "b0")])
    plain = timeline([sim, meas], unit="s")
    assert list(plain.layout.yaxis.categoryarray) == [  # first trace on top
        "measured · dev 1 · comm", "measured · dev 0 · comm", "measured · dev 0 · compute",
        "simulated · dev 1 · compute", "simulated · dev 0 · compute"]
    assert {d.marker.pattern.shape for d in plain.data if d.y[0].startswith("sim")} == {"/"}
    fig = timeline([sim, meas], unit="s", devices=[0], streams=("compute", "comm"), lanes=True,
                   step_time=True)
    assert list(fig.layout.yaxis.categoryarray) == [
        "measured · comm", "measured · compute", "simulated · comm", "simulated · compute"]
    comm = next(d for d in fig.data if d.name == "all_reduce")
    assert list(comm.width) == [0.4, 0.4]
    assert list(comm.offset) == [-0.4, 0.0]
    assert "simulated: 1.00 s; measured: 2.50 s" in fig.layout.title.text
    assert fig.layout.xaxis.title.text == "time from the start of the step (s)"


EV = Event(0, "compute", "forward", 0.0, 1.0)


def _trace() -> Trace:
    tr = Trace("simulated", [EV])
    tr.sample(0, 0.0, "parameters", 100)
    return tr


BAD_CALLS: list[tuple[str, Callable[[], object]]] = [
    ("device", lambda: Event(-1, "compute", "forward", 0.0, 1.0)),
    ("device", lambda: Event(True, "compute", "forward", 0.0, 1.0)),
    ("device", lambda: Event(MAX_DEVICE + 1, "compute", "forward", 0.0, 1.0)),
    ("stream", lambda: Event(0, None, "forward", 0.0, 1.0)),  # type: ignore[arg-type]
    ("kind", lambda: Event(0, "compute", 3, 0.0, 1.0)),  # type: ignore[arg-type]
    ("start_s", lambda: Event(0, "compute", "forward", math.nan, 1.0)),
    ("start_s", lambda: Event(0, "compute", "forward", -1.0, 1.0)),
    ("end_s", lambda: Event(0, "compute", "forward", 0.0, math.inf)),
    ("end_s", lambda: Event(0, "compute", "forward", 0.0, "1")),  # type: ignore[arg-type]
    ("end_s", lambda: Event(0, "compute", "forward", 0.0, MAX_SECONDS * 10)),
    ("end_s", lambda: Event(0, "compute", "forward", 1.0, 0.5)),
    ("nbytes", lambda: Event(0, "comm", "all_reduce", 0.0, 1.0, -8)),
    ("nbytes", lambda: Event(0, "comm", "all_reduce", 0.0, 1.0, 8.0)),  # type: ignore[arg-type]
    ("nbytes", lambda: Event(0, "comm", "all_reduce", 0.0, 1.0, MAX_TOTAL_BYTES + 1)),
    ("label", lambda: Event(0, "compute", "forward", 0.0, 1.0, 0, None)),  # type: ignore[arg-type]
    ("device", lambda: MemorySample(-1, 0.0, "parameters", 1)),
    ("time_s", lambda: MemorySample(0, math.inf, "parameters", 1)),
    ("category", lambda: MemorySample(0, 0.0, None, 1)),  # type: ignore[arg-type]
    ("nbytes", lambda: MemorySample(0, 0.0, "parameters", -1)),
    ("source", lambda: Trace("guessed")),
    ("events", lambda: Trace("measured", events=(EV,))),  # type: ignore[arg-type]
    ("events[1]", lambda: Trace("measured", events=[EV, {"device": 0}])),  # type: ignore[list-item]
    ("memory[0]", lambda: Trace("measured", memory=[EV])),  # type: ignore[list-item]
    ("meta", lambda: Trace("measured", meta=None)),  # type: ignore[arg-type]
    ("event", lambda: _trace().add((0, "compute", "forward", 0.0, 1.0))),  # type: ignore[arg-type]
    ("nbytes", lambda: _trace().sample(0, 0.0, "activations", math.nan)),
    ("nbytes", lambda: _trace().sample(0, 0.0, "activations", -0.5)),
    ("nbytes", lambda: _trace().sample(0, 0.0, "activations", -3)),
    ("nbytes", lambda: _trace().sample(0, 0.0, "activations", "12")),  # type: ignore[arg-type]
    ("time_s", lambda: _trace().sample(0, -1.0, "activations", 1)),
    ("device", lambda: _trace().filter(device="0")),  # type: ignore[arg-type]
    ("stream", lambda: _trace().filter(stream=0)),  # type: ignore[arg-type]
    ("kind", lambda: _trace().filter(kind=["forward"])),  # type: ignore[arg-type]
    ("device", lambda: _trace().busy_s(None, "compute")),  # type: ignore[arg-type]
    ("stream", lambda: _trace().busy_s(0, None)),  # type: ignore[arg-type]
    ("device", lambda: _trace().memory_timeline(-1)),
    ("device", lambda: _trace().peak_memory(1.0)),  # type: ignore[arg-type]
    ("device", lambda: _trace().memory_at_peak(True)),
    ("device", lambda: _trace().totals_by_kind(-2)),
    ("data", lambda: Trace.from_dict([])),  # type: ignore[arg-type]
    ("data['events']", lambda: Trace.from_dict({"events": "none"})),
    ("data['events'][0]", lambda: Trace.from_dict({"events": [[0, "compute"]]})),
    ("data['events'][0]",
     lambda: Trace.from_dict({"events": [{"device": 0, "stream": "compute"}]})),
    ("data['events'][0].start_s", lambda: Trace.from_dict({"events": [
        {"device": 0, "stream": "s", "kind": "k", "start_s": math.nan, "end_s": 1.0}]})),
    ("data['memory'][0].nbytes", lambda: Trace.from_dict({"memory": [
        {"device": 0, "time_s": 0.0, "category": "c", "nbytes": -1}]})),
    ("data['meta']", lambda: Trace.from_dict({"meta": [("a", 1)]})),
    ("data['source']", lambda: Trace.from_dict({"source": "real"})),
]


@pytest.mark.parametrize(("field", "call"), BAD_CALLS,
                         ids=[f"{i}-{field}" for i, (field, _) in enumerate(BAD_CALLS)])
def test_bad_trace_inputs_name_their_field(field: str, call: Callable[[], object]) -> None:
    with raises_naming(field):
        call()


def test_sample_keeps_whole_bytes_of_floats_and_integer_types() -> None:
    tr = Trace()
    tr.sample(0, 0.0, "a", 10.9)
    tr.sample(0, 0.0, "b", np.int64(7))  # type: ignore[arg-type]
    assert [(m.nbytes, type(m.nbytes)) for m in tr.memory] == [(10, int), (7, int)]


def test_sums_over_the_longest_events_stay_finite() -> None:
    tr = Trace(events=[Event(d, "compute", "forward", 0.0, MAX_SECONDS) for d in range(4)]
                      + [Event(0, "compute", "forward", 0.0, MAX_SECONDS)] * 1000)
    assert tr.totals_by_kind() == {"forward": pytest.approx(1004 * MAX_SECONDS)}
    assert math.isfinite(tr.totals_by_kind()["forward"])
    assert tr.busy_s(0, "compute") == MAX_SECONDS == tr.end_s
