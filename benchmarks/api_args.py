"""One argument of a public call, derived from its signature: valid values and perturbations.

`derive_arg(owner, name, hint, default)` reads a parameter's type hint and name:

* `int`, `float`, `bool`: a few valid values to try (the default first);
* `str`: one of the choices its module defines by the house convention (`precision` ->
  `PRECISIONS`, `PLAN_PRECISIONS` or `PRECISION_CHOICES` in the function's own module;
  `*dtype` -> the workload's dtypes; `strategy` -> the registry's names), else free text;
* a dpsim object (`Device`, `Cluster`, `Link`, `Workload`, `Layer`, `Trace`): presets
  (`OBJECTS`); any other dpsim class is built from its own derived arguments;
* sequences of those, and `X | None`.

`perturbations(arg)` lists what the fuzz passes instead: values wrong for the hint (another
type, a bool for a number, NaN, inf, negative numbers, an unknown choice), which must be
refused by a ValueError naming the argument, and edges of the hint's domain (zero, huge,
empty, another valid object), which may be refused by name or accepted with a clean result.
What a hint cannot say is in the short explicit tables at the end (`DATA`, `EXTRA_CHOICES`).
"""

from __future__ import annotations

import collections.abc
import math
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

# Argument kinds: what the hint says, which decides how it is perturbed.
INT, FLOAT, CHOICE, BOOL, NAME, OBJECT = "int", "float", "choice", "bool", "name", "object"
INTS, FLOATS, CHOICES, OBJECTS, SHAPES, DATA_KIND = ("ints", "floats", "choices", "objects",
                                                     "shapes", "data")
NAN, INF = math.nan, math.inf
UNKNOWN = "no-such-choice"
EDGE = "an edge of the hint's domain: refused by name, or accepted with a clean result"
EDGES = frozenset({"zero", "1e9", "1e18", "empty", "elem_zero", "elem_1e18", "unknown_name",
                   "empty_name"})
SEQUENCES = (list, tuple, collections.abc.Sequence)


@dataclass(frozen=True)
class Arg:
    """One argument: its name, kind, valid values to try (best first) and the chosen one."""

    name: str
    kind: str
    candidates: tuple[Any, ...]
    choices: tuple[Any, ...] = ()  # CHOICE / CHOICES: the allowed values
    optional: bool = False  # None is a valid value
    value: Any = None  # the value of the valid base call

    def at(self, index: int) -> Arg:
        """This argument with its `index`-th candidate as the value."""
        return Arg(self.name, self.kind, self.candidates, self.choices, self.optional,
                   self.candidates[index])


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) < len(typing.get_args(hint)) and len(rest) == 1:
            return rest[0], True
    return hint, False


def _plural(name: str) -> str:
    upper = name.upper()
    return upper[:-1] + "IES" if upper.endswith("Y") else upper + "S"


def choices_for(module: str, name: str, plural: bool = False,
                elem: type = str) -> tuple[Any, ...]:
    """The allowed values (of type `elem`) of parameter `name` of a function in `module`,
    by the house convention; `plural`: `name` is a sequence's (`stages` -> `ZERO_STAGES`)."""
    names = (name.upper(),) if plural else (_plural(name), name.upper() + "_CHOICES")
    found: list[Any] = []
    for key, value in vars(sys.modules[module]).items():
        if any(key == n or key.endswith("_" + n) for n in names) and isinstance(
                value, tuple | list | dict | frozenset):
            found += [v for v in value if type(v) is elem and v not in found]
    for suffix, values in EXTRA_CHOICES.items():
        if not found and (name if not plural else name[:-1]).endswith(suffix):
            found = list(values())
    return tuple(found)


def derive_arg(module: str, name: str, hint: Any, default: Any) -> Arg | None:
    """The argument `name: hint = default` of a function in `module`; None if underivable."""
    hint, optional = _unwrap_optional(hint)
    first = () if default is _EMPTY else (default,)
    origin, params = typing.get_origin(hint), typing.get_args(hint)
    if name in DATA:
        return Arg(name, DATA_KIND, (*first, *DATA[name]()), optional=optional)
    if hint is bool:
        return Arg(name, BOOL, (*first, False, True), optional=optional)
    if hint is int:
        return Arg(name, INT, (*first, 8, 4, 2, 1, 16, 64, 0, 2**33), optional=optional)
    if hint is str:
        choices = choices_for(module, name)
        if choices:
            return Arg(name, CHOICE, (*first, *choices), choices, optional)
        return Arg(name, NAME, (*first, "toy"), optional=optional)
    if hint is float:
        return Arg(name, FLOAT, (*first, 0.5, 1.0, 8.0, 100.0), optional=optional)
    if isinstance(hint, type) and hint.__module__.startswith("dpsim"):
        valid = objects_of(hint)
        if not valid and first:
            return None  # an expert's object with a default (fitted constants): left as is
        return Arg(name, OBJECT, (*first, *valid), optional=optional)
    if origin in SEQUENCES and params:
        return _sequence(module, name, origin, params[0], first, optional)
    return None


def _sequence(module: str, name: str, origin: Any, elem: Any, first: tuple[Any, ...],
              optional: bool) -> Arg | None:
    wrap = list if origin is list else tuple
    if elem is int:
        choices = choices_for(module, name, plural=True, elem=int)
        if choices:
            return Arg(name, CHOICES, (*first, wrap(choices[:3])), choices, optional)
        return Arg(name, INTS, (*first, wrap((1, 2, 4, 8)), wrap((10, 4))), optional=optional)
    if elem is float:
        return Arg(name, FLOATS, (*first, wrap((1e-3, 2e-3, 4e-3))), optional=optional)
    if elem is str:
        choices = choices_for(module, name, plural=True)
        return Arg(name, CHOICES, (*first, wrap(choices[:2])), choices, optional)
    if typing.get_origin(elem) is tuple and typing.get_args(elem)[:1] == (int,):
        return Arg(name, SHAPES, (*first, wrap(((10, 4), (4,)))), optional=optional)
    if isinstance(elem, type) and elem.__module__.startswith("dpsim"):
        return Arg(name, OBJECTS, (*first, *(wrap((o,)) for o in objects_of(elem))),
                   optional=optional)
    return None


class _Empty:
    """No default."""


_EMPTY = _Empty()


def empty() -> Any:
    """The marker `derive_arg` takes for a parameter without a default."""
    return _EMPTY


def _ints(arg: Arg) -> list[tuple[str, Any]]:
    return [("str", "8"), ("list", [8]), ("none", None), ("dict", {}), ("bool", True),
            ("float", 8.5), ("nan", NAN), ("inf", INF), ("-inf", -INF), ("negative", -1),
            ("zero", 0), ("1e9", 10**9), ("1e18", 10**18)]


def _floats(arg: Arg) -> list[tuple[str, Any]]:
    return [("str", "0.5"), ("list", [0.5]), ("none", None), ("dict", {}), ("bool", True),
            ("nan", NAN), ("inf", INF), ("-inf", -INF), ("negative", -1.0), ("zero", 0.0),
            ("1e9", 1e9), ("1e18", 1e18)]


def _choice(arg: Arg) -> list[tuple[str, Any]]:
    common: list[tuple[str, Any]] = [("none", None), ("list", [arg.value]), ("dict", {}),
                                     ("bool", True)]
    return [("unknown", UNKNOWN), ("empty", ""), ("int", 3), *common]


def _seq(arg: Arg) -> list[tuple[str, Any]]:
    head = list(arg.value or [])[:-1]
    wrong: list[tuple[str, Any]] = [("str", "8"), ("none", None), ("int", 8), ("dict", {}),
                                    ("empty", [])]
    elems: tuple[tuple[str, Any], ...] = {
        INTS: (("negative", -1), ("zero", 0), ("nan", NAN), ("str", "8"), ("bool", True),
               ("float", 2.5), ("1e18", 10**18)),
        FLOATS: (("nan", NAN), ("inf", INF), ("negative", -1.0), ("zero", 0.0), ("str", "0.5")),
        SHAPES: (("negative", (-1, 4)), ("str", "ab"), ("int", 10)),
        OBJECTS: (("str", "x"), ("none", None)),
    }.get(arg.kind, ())
    if arg.kind == CHOICES:
        ints = all(isinstance(c, int) for c in arg.choices)
        unknown = max(arg.choices) + 1 if ints and arg.choices else UNKNOWN
        elems = (("unknown", unknown), ("none", None))
    return wrong + [(f"elem_{k}", [*head, v]) for k, v in elems]


def _object(arg: Arg) -> list[tuple[str, Any]]:
    others = [(f"other_{i}", c) for i, c in enumerate(arg.candidates) if c is not arg.value]
    return [("str", "x"), ("none", None), ("int", 7), ("list", []), ("dict", {}), *others]


PERTURB: dict[str, Callable[[Arg], list[tuple[str, Any]]]] = {
    INT: _ints, FLOAT: _floats, CHOICE: _choice,
    BOOL: lambda a: [("int0", 0), ("int1", 1), ("str", "yes"), ("none", None),
                     ("list", [True]), ("dict", {})],
    NAME: lambda a: [("none", None), ("int", 7), ("list", ["x"]), ("dict", {}),
                     ("unknown_name", UNKNOWN), ("empty_name", "")],
    OBJECT: _object, INTS: _seq, FLOATS: _seq, CHOICES: _seq, OBJECTS: _seq, SHAPES: _seq,
    DATA_KIND: lambda a: [("str", "x"), ("none", None), ("int", 7),
                          ("dict", {}) if isinstance(a.value, list) else ("list", [])],
}


def perturbations(arg: Arg) -> list[tuple[str, Any, bool]]:
    """(label, value, edge) for one argument; "none" is left out when None is valid."""
    out = [p for p in PERTURB[arg.kind](arg) if not (arg.optional and p[0] == "none")]
    return [(label, value, label in EDGES or label.startswith("other_"))
            for label, value in out]


# --- what hints cannot say: presets for dpsim objects, and structured data by name ---------

@cache
def _presets() -> dict[str, tuple[Any, ...]]:
    from dpsim.sim import get_cluster, get_device, transformer

    tiny = transformer("tiny", 2, 64, 4, 32, 128)  # a 2-layer transformer: a call takes ms
    node, ib4 = get_cluster("h100-node"), get_cluster("h100-ib-4")
    return {"Device": (get_device("h100-80gb"),), "Cluster": (node, ib4),
            "Link": (node.intra_node,), "Workload": (tiny,), "Layer": (tiny.layers[1],)}


def objects_of(cls: type) -> tuple[Any, ...]:
    """Valid objects of a dpsim class: presets, strategies' traces, or one built from its
    own derived arguments (`benchmarks.api_surface.build`)."""
    presets = _presets()
    if cls.__name__ in presets:
        return presets[cls.__name__]
    if cls.__name__ == "Trace":
        return traces()
    built = BUILDERS.get(cls)
    return () if built is None else built()


def objects_of_name(name: str) -> Any:
    """The first preset of the dpsim class called `name` ("Workload", "Cluster", ...)."""
    return _presets()[name][0]


BUILDERS: dict[type, Callable[[], tuple[Any, ...]]] = {}  # filled by api_surface: class -> valid


@cache
def traces() -> tuple[Any, ...]:
    """One simulated trace per registered strategy (its own config's defaults)."""
    from dpsim.sim import get_strategy, strategy_names

    out = []
    for name in strategy_names():
        strategy = get_strategy(name)
        config = objects_of(strategy.config_type)
        workload, cluster = _presets()["Workload"][0], _presets()["Cluster"][0]
        if config:
            out.append(strategy.simulate(workload, cluster, config[0]))
    return tuple(out)


def _strategies() -> tuple[str, ...]:
    from dpsim.sim import strategy_names

    return strategy_names()


def _models() -> tuple[str, ...]:
    from dpsim.sim import PRESETS

    return PRESETS


def _dtypes() -> tuple[str, ...]:
    from dpsim.sim import DTYPE_BYTES

    return tuple(DTYPE_BYTES)


def _dp_summary() -> tuple[Any, ...]:
    from dpsim.widgets.dp_explorer import explore

    return (explore()[1],)


def _curve() -> tuple[Any, ...]:
    from dpsim.sim import planner

    workload, cluster = objects_of_name("Workload"), objects_of_name("Cluster")
    return (planner.scaling_curve(workload, cluster, "ddp", 64, n_devices=(1, 2, 4, 8)),)


def _trace_dict() -> tuple[Any, ...]:
    return (traces()[0].to_dict(),)


# Choices named against the plural convention, by the parameter's name (or its ending).
EXTRA_CHOICES: dict[str, Callable[[], tuple[str, ...]]] = {
    "dtype": _dtypes, "strategy": _strategies, "model": _models,
}
def _configs() -> tuple[Any, ...]:
    from dpsim.sim import DDPConfig, DPConfig, FSDPConfig, GILConfig, HSDPConfig, SingleConfig

    return (DDPConfig(), DPConfig(), FSDPConfig(), HSDPConfig(), SingleConfig(), GILConfig())


# Structured data by parameter name: one valid value each.
DATA: dict[str, Callable[[], tuple[Any, ...]]] = {
    "threads": lambda: ([[("gil", 1e-3), ("free", 1e-3)]] * 2,),
    "arrays": lambda: ([np.arange(6.0), np.arange(6.0) + 1, np.arange(6.0) + 2],),
    "measured": lambda: ({"torch": {1024: 1e-4, 2**20: 1e-3}},),
    "summary": _dp_summary,
    "data": _trace_dict,
    "curve": _curve,
    # the face's simulate: any strategy's config, on a cluster (a device for SingleConfig)
    "hardware": lambda: (objects_of_name("Cluster"), objects_of_name("Device")),
    "config": _configs,
    "sizes_bytes": lambda: ([2**10, 2**20, 2**24],),
    "times_s": lambda: ([2e-5, 1e-4, 1e-3],),
}
