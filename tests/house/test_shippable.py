"""Every function of the labs and the runtime can be shipped to ranks inside a launched function.

`launch` pickles the function it runs with dill's `recurse=True`, which walks the globals of
every function it reaches. dill keeps no memo of the functions it has walked, so a call cycle
between module functions (a calls b, b calls a) makes the walk endless and the launch fails
with a RecursionError before any rank starts. Self-recursion is fine.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from collections.abc import Iterator
from types import FunctionType

import dill
import pytest

import dpsim.labs
import dpsim.runtime


def _functions() -> Iterator[FunctionType]:
    for package in (dpsim.labs, dpsim.runtime):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for _name, obj in vars(module).items():
                if isinstance(obj, FunctionType) and obj.__module__ == module.__name__:
                    yield obj


FUNCTIONS = sorted(_functions(), key=lambda f: f"{f.__module__}.{f.__qualname__}")


def test_functions_were_found() -> None:
    assert len(FUNCTIONS) > 100


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f"{f.__module__}.{f.__qualname__}")
def test_no_call_cycle_through_module_globals(fn: FunctionType) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(600)  # a cycle fails fast; the deepest honest walk is far shallower
    try:
        dill.detect.globalvars(fn, recurse=True)
    except RecursionError:
        pytest.fail(f"{fn.__module__}.{fn.__qualname__} reaches a call cycle through module "
                    "functions: dill cannot ship a launched function that calls it (move the "
                    "shared part into a third function both call)")
    finally:
        sys.setrecursionlimit(limit)
    assert inspect.isfunction(fn)
