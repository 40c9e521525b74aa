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
