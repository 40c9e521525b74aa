"""The public API on arbitrary inputs: a clean result, or a ValueError naming an argument.

For the simulator's face (`dpsim.sim.__all__`: its functions and the dataclasses that check
themselves; `benchmarks/api_surface.py` reads them and derives a valid call of each from
its signature and type hints), hypothesis replaces one or two arguments of a valid call by
values of their kind or by anything at all (integers from -2**70 to 2**70, floats with NaN
and inf, bools, text, None). Each call (a config with its simulation) must return within 1 s
(SIGALRM, with a memory cap so that a huge size fails to allocate) and then either return
numbers that are all finite and non-negative, or raise a ValueError whose message names one
of the entry point's arguments as `name=` (an element as `name[`). The fuzz of every entry
point, one argument at a time, is `python -m benchmarks.fuzz_api`; this test imports its
discovery, so it runs from the repository root (`python -m pytest`, as `make test` does).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.api_args import BOOL, CHOICE, FLOAT, INT, INTS, NAME, Arg
from benchmarks.api_harness import bad_numbers, call_bounded, names_field
from benchmarks.api_surface import EntryPoint, entry_for, entry_point, entry_points, skipped
from dpsim.sim import Cluster, Link

SECONDS = 1.0  # time bound per call
# Examples perturb at most two arguments, so they are short as found; shrinking one that
# hangs would replay it (1 s each) hundreds of times.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
EXAMPLES = 40  # per entry point


def _representative() -> list[str]:
    """Every entry point of the simulator's face that takes arguments (not its classes'
    methods)."""
    return [e.name for e in entry_points(widgets=False) if e.name.count(".") == 2 and e.args]


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


@pytest.mark.parametrize("name", _representative())
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
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
    walk = call_bounded(lambda: bad_numbers(outcome.result), 10 * SECONDS)
    assert walk.status == "returned", f"reading what {call} returned: {walk.error!r}"
    assert not walk.result, f"{call} returned NaN, inf or negative numbers: {walk.result}"


def test_every_boundary_name_gets_a_valid_call_or_a_reason() -> None:
    """Every public name at the boundary (the widgets' too) has a valid call derived from its
    signature, so `python -m benchmarks fuzz_api` covers it; what is left out says why."""
    problems = {e.name: e.problem for e in entry_points() if e.problem}
    assert not problems, f"no valid call derived (give the argument a type hint, a default, " \
                         f"or a row in benchmarks/api_args.py's DATA): {problems}"
    assert all(reason.strip() for reason in skipped().values())
    names = {e.name for e in entry_points()}
    for wanted in ("dpsim.sim.plan", "dpsim.sim.scaling_curve", "dpsim.sim.crossover",
                   "dpsim.sim.summary_table", "dpsim.sim.simulate", "dpsim.sim.step_result",
                   "dpsim.sim.Cluster", "dpsim.sim.Workload",
                   "widgets.strategy_dashboard.StrategyExplorer.render"):
        assert any(n.endswith(wanted) for n in names), wanted


def example_new_function(collective: str, nbytes: int, world_size: int, link: Link,
                         cluster: Cluster, bucket_cap_mb: float = 25.0,
                         overlap: bool = True) -> float:
    """A function nobody listed anywhere: its valid call comes from its hints alone."""
    if world_size > cluster.world_size:
        raise ValueError(f"world_size={world_size} is above the cluster's "
                         f"{cluster.world_size}; allowed: 1..{cluster.world_size}")
    if collective not in ("all_reduce", "all_gather"):
        raise ValueError(f"collective={collective!r} is not known; allowed: 'all_reduce', "
                         "'all_gather'")
    return nbytes / link.bandwidth_GBps * (1.0 if overlap else 2.0) + bucket_cap_mb


def test_a_new_function_with_ordinary_hints_is_derived() -> None:
    entry = entry_for(example_new_function)
    assert not entry.problem, entry.problem
    values = {a.name: a.value for a in entry.args}
    assert values["collective"] == "all_reduce"  # read from the ValueError's "allowed:"
    assert values["bucket_cap_mb"] == 25.0  # the defaults
    assert values["overlap"] is True
    assert isinstance(values["link"], Link)
    assert isinstance(values["cluster"], Cluster)
    assert entry.call() >= 0
