"""The strategies the planner, the figures and the dashboards know, by name, in order.

"single", "dp", "ddp", then FSDP at ZeRO stages 1, 2 and 3 ("zero1", "zero2", "fsdp"), then
HSDP ("hsdp": FSDP within a node, replicas across nodes).
A new strategy is one `strategies.base.Strategy` subclass plus one `register` call (here
for a permanent one, in a test or a notebook for an experiment).
"""

from __future__ import annotations

from typing import Annotated, Any

from dpsim.sim.checks import OneOf
from dpsim.sim.strategies import ddp, dp, fsdp, single
from dpsim.sim.strategies.base import Strategy
from dpsim.sim.strategies.fsdp import hsdp

_REGISTRY: dict[str, Strategy[Any]] = {}


def register(strategy: Strategy[Any]) -> Strategy[Any]:
    """Add `strategy` under its name (after the others); ValueError if the name is taken."""
    if strategy.name in _REGISTRY:
        raise ValueError(f"name={strategy.name!r} is already registered; allowed: a name "
                         f"other than {', '.join(repr(n) for n in _REGISTRY)}")
    _REGISTRY[strategy.name] = strategy
    return strategy


def unregister(name: str) -> None:
    """Remove the strategy registered as `name`."""
    del _REGISTRY[name]


def get_strategy(name: Annotated[str, OneOf(lambda: _REGISTRY)]) -> Strategy[Any]:
    """The strategy registered as `name` (one of `names()`)."""
    return _REGISTRY[name]


def names() -> tuple[str, ...]:
    """Every registered name, in registration order."""
    return tuple(_REGISTRY)


for _strategy in (single.STRATEGY, dp.STRATEGY, ddp.STRATEGY, fsdp.ZERO1, fsdp.ZERO2,
                  fsdp.ZERO3, hsdp.STRATEGY):
    register(_strategy)
