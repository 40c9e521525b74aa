"""Shipping fn, its arguments and a rank's result with dill, and naming what cannot ship.

`dumps(obj)` is `dill.dumps(obj, recurse=True)` with one change: to find the globals a
function defined in `__main__` (a notebook cell) uses, it follows only the functions dill
ships by value (those of `__main__`), never an importable library function, which dill
ships by reference (module + qualified name) anyway. dill's own search follows every
function it meets, and some library functions make it recurse without end
(`torch.distributed.fsdp.fully_shard` in torch 2.13: RecursionError), so a cell that
imports such a name at its top could not be shipped.

When shipping fails, each part is tried on its own (a function's globals, closure cells and
defaults; a method's object; a partial's parts; container items; object attributes), and
the innermost parts that still fail are named with their type: "args[0] (generator)",
"SOCK (socket.socket; a global used by fn `work`)".
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import types
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["describe_unpicklable", "dumps", "unpicklable_parts"]

_MAX_DEPTH = 4  # how deep the search looks inside an object
_MAX_CHILDREN = 64  # parts of one object tried, at most
_MAX_PARTS = 8  # parts named, at most


_patch_lock = threading.RLock()


def dumps(obj: Any) -> bytes:
    """dill bytes of `obj` (recurse=True), library functions by reference (module doc)."""
    import dill

    with _globals_by_value_only():
        data: bytes = dill.dumps(obj, recurse=True)
    return data


@contextlib.contextmanager
def _globals_by_value_only() -> Iterator[None]:
    """dill's search for a function's globals (`dill.detect.globalvars`, which dill's
    save_function imports on each call) replaced by `globals_used` meanwhile."""
    import dill.detect

    with _patch_lock:
        original = dill.detect.globalvars

        def globalvars(func: Any, recurse: bool = True, builtin: bool = False
                       ) -> dict[str, Any]:
            if not recurse:  # dill's own: it does not follow other functions
                return dict(original(func, recurse, builtin))
            return globals_used(func, builtin)

        dill.detect.globalvars = globalvars
        try:
            yield
        finally:
            dill.detect.globalvars = original


def by_reference(obj: Any) -> bool:
    """True when `obj` is importable as `obj.__module__` + `obj.__qualname__`, which is how
    dill pickles a function not defined in `__main__`."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module_name in ("__main__", "__mp_main__", None) or not isinstance(qualname, str):
        return False
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return False
    return found is obj


def globals_used(func: Any, builtin: bool = False,
                 seen: set[int] | None = None) -> dict[str, Any]:
    """name -> object of the globals `func` uses, and those of the functions it uses that
    dill ships by value (closures and nested code included); builtins too if `builtin`."""
    import builtins

    from dill.detect import nestedglobals

    if isinstance(func, types.MethodType):
        func = func.__func__
    if not isinstance(func, types.FunctionType):
        return {}
    seen = set() if seen is None else seen
    seen.add(id(func))
    scope: dict[str, Any] = vars(builtins).copy() if builtin else {}
    names: set[str] = set()
    for cell in func.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if _follow(contents, seen):
            found = globals_used(contents, builtin, seen)
            names.update(found)
            scope.update(found)
    scope.update(func.__globals__ or {})
    names.update(nestedglobals(func.__code__))
    for name in list(names):
        value = scope.get(name)
        if _follow(value, seen):
            names.update(globals_used(value, builtin, seen))
    return {name: scope[name] for name in names if name in scope}


def _follow(value: Any, seen: set[int]) -> bool:
    """Whether the search goes into `value`: a function dill ships by value, not yet seen."""
    if isinstance(value, types.MethodType):
        value = value.__func__
    return (isinstance(value, types.FunctionType) and id(value) not in seen
            and not by_reference(value))


def picklable(obj: Any) -> bool:
    """True when dill pickles `obj` the way launch ships it (`dumps`)."""
    try:
        dumps(obj)
    except Exception:
        return False
    return True


def type_name(obj: Any) -> str:
    """`generator`, `socket.socket`: the type, with its module unless it is a builtin."""
    cls = type(obj)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def unpicklable_parts(expr: str, obj: Any, kind: str = "", depth: int = _MAX_DEPTH,
                      limit: int = _MAX_PARTS) -> list[str]:
    """'expr (type; kind)' for each innermost part of `obj` that dill cannot pickle.

    [] when `obj` pickles; at most `limit` parts. `expr` names `obj` (e.g. "args[0]"),
    `kind` says what it is.
    """
    if picklable(obj):
        return []
    found: list[str] = []
    if depth > 0:
        for child_expr, child, child_kind in _children(expr, obj, kind):
            if len(found) >= limit:
                break
            found += unpicklable_parts(child_expr, child, child_kind, depth - 1,
                                       limit - len(found))
    if found:
        return found
    return [f"{expr} ({type_name(obj)}{'; ' + kind if kind else ''})"]


def describe_unpicklable(fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """'; '-joined parts of fn, args and kwargs that dill cannot pickle ('' if none found)."""
    name = getattr(fn, "__name__", type_name(fn))
    roots = [(name, fn, f"fn `{name}`")]
    roots += [(f"args[{i}]", arg, "") for i, arg in enumerate(args)]
    roots += [(f"kwargs[{key!r}]", value, "") for key, value in kwargs.items()]
    parts: list[str] = []
    for expr, obj, kind in roots:
        if len(parts) >= _MAX_PARTS:
            if not picklable(obj):
                parts.append("and more")
            break
        parts += unpicklable_parts(expr, obj, kind, limit=_MAX_PARTS - len(parts))
    return "; ".join(dict.fromkeys(parts))  # each part once


# --------------------------------------------------------------------------- parts


def _children(expr: str, obj: Any, kind: str) -> Iterator[tuple[str, Any, str]]:
    """(expression, part, kind) of the parts of `obj` that pickling it pickles too."""
    if isinstance(obj, types.FunctionType):
        parts = _function_parts(obj)
    elif isinstance(obj, types.MethodType):
        parts = iter([(f"{expr}.__self__", obj.__self__, f"the object whose method is {expr}"),
                      (f"{expr}.__func__", obj.__func__, kind)])
    elif isinstance(obj, functools.partial):
        parts = _partial_parts(expr, obj, kind)
    elif isinstance(obj, Mapping):
        parts = ((f"{expr}[{k!r}]", v, kind) for k, v in _items(obj))
    elif isinstance(obj, list | tuple | set | frozenset):
        parts = ((f"{expr}[{i}]", v, kind) for i, v in enumerate(obj))
    else:
        try:
            attrs = dict(vars(obj))
        except TypeError:
            return
        parts = ((f"{expr}.{k}", v, kind) for k, v in attrs.items())
    for count, part in enumerate(parts):
        if count >= _MAX_CHILDREN:
            return
        yield part


def _items(mapping: Mapping[Any, Any]) -> Iterator[tuple[Any, Any]]:
    try:
        yield from mapping.items()
    except Exception:
        return


def _function_parts(fn: types.FunctionType) -> Iterator[tuple[str, Any, str]]:
    """The globals `fn` uses, its closure cells and its defaults."""
    import dill.detect

    name = fn.__name__
    try:  # the globals of the functions it calls and of the functions defined inside it too
        used = dill.detect.globalvars(fn, recurse=True)
    except Exception:
        used = {}
    for key, value in used.items():
        # Modules pickle by name; a called function's globals are already in `used`.
        if not isinstance(value, types.ModuleType | types.FunctionType):
            yield key, value, f"a global used by fn `{name}`"
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        yield var, value, f"a variable of fn `{name}`'s closure"
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return
    for param in params:
        if param.default is not inspect.Parameter.empty:
            yield (param.name, param.default,
                   f"the default of fn `{name}`'s parameter {param.name}")


def _partial_parts(expr: str, obj: functools.partial[Any], kind: str
                   ) -> Iterator[tuple[str, Any, str]]:
    """The function, arguments and keywords of a functools.partial."""
    yield f"{expr}.func", obj.func, kind
    for i, arg in enumerate(obj.args):
        yield f"{expr}.args[{i}]", arg, kind
    for key, value in obj.keywords.items():
        yield f"{expr}.keywords[{key!r}]", value, kind
