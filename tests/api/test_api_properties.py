"""The public API on arbitrary inputs: a clean result, or a ValueError naming an argument.

For a representative set of entry points (the table in `benchmarks/api_surface.py`),
hypothesis replaces one or two arguments of a valid call by values of their kind or by
anything at all (integers from -2**70 to 2**70, floats with NaN and inf, bools, text,
None). Each call (a config with its simulation) must return within 1 s (SIGALRM, with a
memory cap so that a huge size fails to allocate) and then either return numbers that are
all finite and non-negative, or raise a ValueError whose message names one of the entry
point's arguments as `name=` (an element as `name[`). The fuzz of every entry point, one
argument at a time, is `python -m benchmarks.fuzz_api`; this test imports its table, so it
runs from the repository root (`python -m pytest`, as `make test` does).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.api_harness import bad_numbers, call_bounded, names_field
from benchmarks.api_surface import (
    BOOL,
    CHOICE,
    FLOAT,
    INT,
    INTS,
    NAME,
    Arg,
    EntryPoint,
    entry_point,
)

SECONDS = 1.0  # time bound per call
# Examples perturb at most two arguments, so they are short as found; shrinking one that
# hangs would replay it (1 s each) hundreds of times.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
REPRESENTATIVE = (
    "hardware.Device", "hardware.Link", "hardware.Cluster", "workload.Layer",
    "workload.transformer", "memory.model_state_bytes", "memory.zero_bytes_per_device",
    "collectives.cost.collective_time_s", "collectives.cost.bytes_sent_per_rank",
    "collectives.ring.chunk_bounds", "gil.GILConfig", "strategies.ddp.DDPConfig",
    "strategies.fsdp.FSDPConfig", "strategies.dp.DPConfig", "planner.plan",
    "planner.crossover_formula", "collectives.nccl.nccl_time_s",
)

ANYTHING = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=6),
    st.none(),
)
EDGES = st.sampled_from([0, -1, 10**9, 10**18, math.nan, math.inf, -math.inf])


def _of_kind(arg: Arg) -> st.SearchStrategy[object]:
    """Values of the argument's own kind: small and edge numbers, its choices, text."""
    if arg.kind == INT:
        return st.integers(min_value=-2, max_value=64) | EDGES
    if arg.kind == FLOAT:
        return st.floats(min_value=-1.0, max_value=1e3) | EDGES
    if arg.kind == CHOICE:
        return st.sampled_from(arg.choices) | st.text(max_size=6)
    if arg.kind == BOOL:
        return st.booleans() | st.integers(min_value=0, max_value=1)
    if arg.kind == NAME:
        return st.text(max_size=6)
    if arg.kind == INTS:
        return st.lists(st.integers(min_value=-2, max_value=64) | EDGES, max_size=4)
    return st.just(arg.value)


@st.composite
def arguments(draw: st.DrawFn, entry: EntryPoint) -> dict[str, object]:
    """One or two arguments replaced by a value of their kind or anything; the rest valid.

    Replacing a few at a time keeps one refused argument from hiding the others.
    """
    names = [a.name for a in entry.args]
    chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=min(2, len(names)),
                           unique=True))
    return {a.name: draw(_of_kind(a) | ANYTHING, label=a.name) if a.name in chosen
            else a.value for a in entry.args}


@pytest.mark.parametrize("name", REPRESENTATIVE)
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          phases=NO_SHRINK, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_clean_result_or_valueerror_naming_an_argument(name: str, data: st.DataObject) -> None:
    entry = entry_point(name)
    kwargs = data.draw(arguments(entry), label="arguments")
    outcome = call_bounded(lambda: entry.call(**kwargs), SECONDS)
    call = f"{entry.name}(**{kwargs!r})"
    assert outcome.status != "hang", f"{call} did not return within {SECONDS} s"
    if outcome.status == "raised":
        err = outcome.error
        named = isinstance(err, ValueError) and any(names_field(str(err), a.name)
                                                    for a in entry.args)
        assert named, f"{call} raised {type(err).__name__}: {err}; want a ValueError naming " \
                      f"one of {[a.name for a in entry.args]}"
        return
    walk = call_bounded(lambda: bad_numbers(outcome.result, skip=entry.skip), 10 * SECONDS)
    assert walk.status == "returned", f"reading what {call} returned: {walk.error!r}"
    assert not walk.result, f"{call} returned NaN, inf or negative numbers: {walk.result}"


def test_every_public_name_is_fuzzed_or_skipped_with_a_reason() -> None:
    """A new public function or class joins the fuzz's table (benchmarks/api_table*.py) or
    `SKIPPED` with its reason, so `python -m benchmarks fuzz_api` covers the whole API."""
    from benchmarks.api_surface import SKIPPED, covers, discover, entry_points

    entries = entry_points()
    missing = [d for d in discover()
               if d not in SKIPPED and not any(covers(e.name, d) for e in entries)]
    assert not missing, f"add these to the fuzz's table or to SKIPPED: {missing}"
    assert all(reason.strip() for reason in SKIPPED.values())
