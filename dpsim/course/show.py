"""`show_source`: the real torch code behind a helper, one call away in a notebook."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def show_source(fn: Callable[..., Any]) -> str:
    """Print (and return) the source of `fn` with the file and line it comes from."""
    if not callable(fn):
        raise ValueError(f"fn={fn!r} is not allowed; allowed: a function, method or class")
    try:
        lines, start = inspect.getsourcelines(fn)
        where = f"{inspect.getsourcefile(fn)}:{start}"
    except (OSError, TypeError) as exc:
        raise ValueError(f"fn={fn!r} has no Python source to show ({exc})") from None
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    text = f"# {name}  ({where})\n" + "".join(lines)
    print(text)
    return text
