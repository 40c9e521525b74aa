import pytest

from dpsim.trace import Event, Trace


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
