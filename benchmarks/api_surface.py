"""The public API's boundary, read from the simulator's face, and one valid call of each entry.

The boundary (where input enters, so where a bad value must get a ValueError naming it):

1. every function and every self-checking class (`__post_init__`: configs, hardware,
   workload, trace records) that `dpsim.sim.__all__` names, with the classes' public
   methods (called on a fresh valid instance); a config class's calls also run its
   strategy's simulation (`then`);
2. every public function, class and method of `dpsim.widgets`, except builders of
   ipywidgets controls (their return hint is an ipywidgets type).

Left out by rule (`LEFT_OUT`): the face's modules (`fidelity`, the validation harness over
shipped data, run by `python -m dpsim validate`; `link_constants`, data) and the `require_*`
checks the face lends the other wings (each names the field its caller gives it).

Arguments come from signatures and type hints (`benchmarks.api_args`). The valid base call
is searched for: every argument starts at its first candidate (its default when it has
one) and, while the call raises a ValueError naming an argument, that argument moves on to
its next candidate. `SKIPPED` and `ERRORS_AS_TEXT` are all that is listed by hand.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import inspect
import pkgutil
import re
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import api_args
from benchmarks.api_args import Arg, derive_arg, empty
from benchmarks.api_harness import call_bounded

ROOT = Path(__file__).resolve().parents[1]
REPAIRS = 24  # calls tried while searching for a valid base call
BASE_SECONDS = 30.0  # time bound of one try (the first call imports and fills caches)
LEFT_OUT = {"fidelity": "the validation harness over the shipped dataset; run by python -m "
                        "dpsim validate and tests/sim/test_fidelity*.py",
            "link_constants": "the collective model's constants: data, not a function",
            "require_": "the checks the face lends other wings: each names the field its "
                        "caller passes"}
# Boundary names (by qualified name, wherever their module lives) not fuzzed, and why.
SKIPPED: dict[str, str] = {
    "dp_explorer": "builds ipywidgets controls; its explore and render functions are fuzzed",
    "own_workload": "runs a learner's torch module; the simulator's fuzz starts no torch model",
    "model_choices": "lists the dashboard's model names; render and curve take the choice",
    "check_model": "the check StrategyExplorer.render runs first; fuzzed through it",
    "shipped_rows": "the validation harness's rows over the shipped dataset: signed errors, "
                    "no argument to vary",
    "held_out_summary": "summarises the validation harness's own rows (shipped_rows); the "
                        "harness over the shipped dataset is left out",
}
# A returned first line with this prefix reports a ValueError (a dashboard shows its errors).
ERRORS_AS_TEXT = {"StrategyExplorer.render": "cannot simulate this setting: "}


@dataclass(frozen=True)
class EntryPoint:
    """A public callable and a valid call of it (every argument passed by keyword)."""

    name: str  # "dpsim.sim.planner.plan", "dpsim.sim.hardware.cluster.Cluster.with_devices", ...
    fn: Callable[..., Any]
    args: tuple[Arg, ...] = ()
    then: Callable[[Any], Any] | None = None  # run on the result (a config -> its simulation)
    errors_as_text: str = ""
    text: bool = False  # also look for nan, inf, negative numbers in returned strings
    problem: str = ""  # why no valid call was found ("" when one was)

    def call(self, **overrides: Any) -> Any:
        """Call with the valid arguments, `overrides` replacing some; then `then`."""
        kwargs = {a.name: a.value for a in self.args} | overrides
        result = self.fn(**kwargs)
        return result if self.then is None else (result, self.then(result))

    def arg(self, name: str) -> Arg:
        """The argument called `name`."""
        return next(a for a in self.args if a.name == name)


# --- which names are the boundary ------------------------------------------------------------

def _modules(package: str) -> Iterator[Any]:
    root = importlib.import_module(package)
    yield root
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        yield importlib.import_module(info.name)


def _defined(module: Any) -> Iterator[tuple[str, Any]]:
    for name, obj in vars(module).items():
        if (not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
                and (inspect.isfunction(obj) or inspect.isclass(obj))):
            yield name, obj


def _is_strategy(cls: type) -> bool:
    return all(callable(getattr(cls, m, None)) for m in ("simulate", "step_result"))


def _is_record(obj: Any) -> bool:
    """A dataclass that does not check itself: a result the library builds."""
    return dataclasses.is_dataclass(obj) and "__post_init__" not in vars(obj)


def _checks_itself(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) and "__post_init__" in vars(cls)


def _builds_widgets(fn: Any) -> bool:
    hint = inspect.signature(fn).return_annotation
    return "widgets." in str(hint) or "ipywidgets" in str(getattr(hint, "__module__", ""))


@functools.cache
def boundary(widgets: bool = True) -> dict[str, Any]:
    """Every boundary name ("dpsim.sim.plan", "dpsim.widgets.x.f") -> its function or class:
    the face's `__all__` in its order, then the widgets' unless `widgets` is False."""
    import dpsim.sim as face

    out: dict[str, Any] = {}
    for name in face.__all__:
        obj = getattr(face, name)
        if any(name.startswith(p) for p in LEFT_OUT):
            continue
        if inspect.isfunction(obj) or (inspect.isclass(obj) and _checks_itself(obj)):
            out[f"dpsim.sim.{name}"] = obj
    for module in _modules("dpsim.widgets") if widgets else ():
        out |= {f"{module.__name__}.{name}": obj for name, obj in _defined(module)
                if not _is_record(obj)}
    return out


def _skip_reason(qualname: str, obj: Any) -> str | None:
    if qualname in SKIPPED:
        return SKIPPED[qualname]
    if inspect.isfunction(obj) and _builds_widgets(obj):
        return "builds ipywidgets controls; its explore/render functions are fuzzed"
    return None


def skipped(widgets: bool = True) -> dict[str, str]:
    """Boundary names left out, with why."""
    return {name: reason for name, obj in boundary(widgets).items()
            if (reason := _skip_reason(obj.__qualname__, obj)) is not None}


# --- one valid call of each -------------------------------------------------------------------

def _derived_args(fn: Any, module: str, hints_of: Any) -> tuple[list[Arg], str]:
    try:
        hints = typing.get_type_hints(hints_of)
        params = inspect.signature(fn).parameters
    except (NameError, TypeError, ValueError) as err:
        return [], f"signature not readable: {err}"
    args = []
    for p in params.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        factory = p.default is not p.empty and type(p.default).__name__.startswith("_HAS_")
        default = empty() if p.default is p.empty or factory else p.default
        arg = derive_arg(module, p.name, hints.get(p.name, Any), default)
        if arg is None or not arg.candidates:
            if p.default is p.empty:
                return [], f"no value derived for {p.name}: {hints.get(p.name)}"
            continue  # a parameter with a default the fuzz cannot vary: left at its default
        args.append(arg.at(0))
    return args, ""


def _search(fn: Callable[..., Any], args: list[Arg], then: Callable[[Any], Any] | None,
            errors_as_text: str = "") -> tuple[tuple[Arg, ...], str]:
    """The arguments of a valid call (see the module's docstring), or a problem."""
    index = dict.fromkeys((a.name for a in args), 0)
    for _ in range(REPAIRS):
        chosen = tuple(a.at(index[a.name]) for a in args)
        kwargs = {a.name: a.value for a in chosen}
        outcome = call_bounded(functools.partial(_run, fn, kwargs, then), BASE_SECONDS)
        text = outcome.result
        if isinstance(text, tuple | list):
            text = text[0] if text else None
        if errors_as_text and isinstance(text, str) and text.startswith(errors_as_text):
            outcome = dataclasses.replace(outcome, status="raised",
                                          error=ValueError(text[len(errors_as_text):]))
        if outcome.status == "returned":
            return chosen, ""
        message = f"{type(outcome.error).__name__}: {outcome.error}"
        if not isinstance(outcome.error, ValueError):
            return chosen, message
        named = sorted(((m.start(), a) for a in args
                        if (m := re.search(rf"(?<![\w.]){re.escape(a.name)}[=\[]", message))),
                       key=lambda pair: pair[0])
        told = _first_allowed(message)
        if named and told is not None and told not in named[0][1].candidates:
            first = named[0][1]  # the boundary says what it allows: try that next
            args[args.index(first)] = first = dataclasses.replace(
                first, candidates=(*first.candidates[:index[first.name] + 1], told,
                                   *first.candidates[index[first.name] + 1:]))
        current = {a.name: a for a in args}
        movable = [current[a.name] for _, a in named
                   if index[a.name] + 1 < len(current[a.name].candidates)]
        if not movable:
            return chosen, message
        index[min(movable, key=lambda a: index[a.name]).name] += 1  # the least moved first
    return tuple(a.at(index[a.name]) for a in args), f"no valid call in {REPAIRS} tries"


def _first_allowed(message: str) -> str | None:
    """The first quoted value after "allowed:" in a ValueError's message."""
    match = re.search(r"allowed: '([^']*)'", message)
    return None if match is None else match.group(1)


def _run(fn: Callable[..., Any], kwargs: dict[str, Any],
         then: Callable[[Any], Any] | None) -> Any:
    result = fn(**kwargs)
    return result if then is None else then(result)


def _simulation_of(cls: type) -> Callable[[Any], Any] | None:
    """For a strategy's config class: the simulation and step result of a config."""
    from dpsim.sim import get_strategy, strategy_names

    for name in strategy_names():
        strategy = get_strategy(name)
        if strategy.config_type is cls:
            def then(config: Any, s: Any = strategy) -> Any:
                trace = s.simulate(api_args.objects_of_name("Workload"),
                                   api_args.objects_of_name("Cluster"), config)
                return s.step_result(trace)

            return then
    return None


def _entry(name: str, fn: Callable[..., Any], module: str, hints_of: Any, qualname: str,
           then: Callable[[Any], Any] | None = None) -> EntryPoint:
    args, problem = _derived_args(fn, module, hints_of)
    errors_as_text = ERRORS_AS_TEXT.get(qualname, "")
    if not problem:
        found, problem = _search(fn, args, then, errors_as_text)
        args = list(found)
    return EntryPoint(name, fn, tuple(args), then, errors_as_text,
                      text=module.startswith("dpsim.widgets"), problem=problem)


def _class_entries(name: str, cls: type) -> list[EntryPoint]:
    hints_of = cls if dataclasses.is_dataclass(cls) else vars(cls).get("__init__", cls)
    made = _entry(name, cls, cls.__module__, hints_of, cls.__qualname__,
                  _simulation_of(cls))
    out = [made]
    if made.problem:
        return out

    def fresh() -> Any:
        return copy.deepcopy(api_args.objects_of(cls)[0])

    for meth_name, member in list(vars(cls).items()):
        if meth_name.startswith("_"):
            continue
        if isinstance(member, classmethod):
            out.append(_entry(f"{name}.{meth_name}", getattr(cls, meth_name), cls.__module__,
                              member.__func__, f"{cls.__qualname__}.{meth_name}"))
        elif inspect.isfunction(member):
            def call(__m: str = meth_name, **kw: Any) -> Any:
                return getattr(fresh(), __m)(**kw)

            call.__signature__ = inspect.signature(member)  # type: ignore[attr-defined]
            out.append(_entry(f"{name}.{meth_name}", call, cls.__module__, member,
                              f"{cls.__qualname__}.{meth_name}"))
    return out


@functools.cache
def entry_points(widgets: bool = True) -> tuple[EntryPoint, ...]:
    """Every boundary entry point with its derived valid call, in walk order (the widgets'
    too unless `widgets` is False)."""
    classes: list[Any] = [o for o in boundary(widgets).values() if inspect.isclass(o)]
    for cls in classes:
        api_args.BUILDERS.setdefault(cls, functools.partial(_built, cls))
    out: list[EntryPoint] = []
    for name, obj in boundary(widgets).items():
        if _skip_reason(obj.__qualname__, obj) is not None:
            continue
        if inspect.isclass(obj):
            out += _class_entries(name, obj)
        else:
            out.append(_entry(name, obj, obj.__module__, obj, obj.__qualname__))
    return tuple(out)


@functools.cache
def _built(cls: Any) -> tuple[Any, ...]:
    """A valid instance of a boundary class, from its derived arguments (none if not found)."""
    hints_of = cls if dataclasses.is_dataclass(cls) else vars(cls).get("__init__", cls)
    entry = _entry(cls.__qualname__, cls, cls.__module__, hints_of, cls.__qualname__)
    return () if entry.problem else (entry.fn(**{a.name: a.value for a in entry.args}),)


def entry_for(fn: Callable[..., Any], name: str = "") -> EntryPoint:
    """The entry point of any function or class, its valid call derived (a new public
    function needs nothing else)."""
    if inspect.isclass(fn):
        return _class_entries(name or fn.__qualname__, fn)[0]
    return _entry(name or fn.__qualname__, fn, fn.__module__, fn, fn.__qualname__)


def entry_point(name: str, widgets: bool = False) -> EntryPoint:
    """The entry point called `name`, or the one whose name ends with `.name`."""
    for entry in entry_points(widgets):
        if entry.name == name or entry.name.endswith("." + name):
            return entry
    raise ValueError(f"name={name!r} is not an entry point; allowed: "
                     f"{', '.join(e.name for e in entry_points(widgets))}")
