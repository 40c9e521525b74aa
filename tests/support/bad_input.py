"""Shared by the tests of bad input: run a call that should refuse, and check whom it names."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest


def outcome(call: Callable[[], Any]) -> tuple[Any, str]:
    """(the result, "") of a call, or (None, the message) of the ValueError it raised."""
    try:
        return call(), ""
    except ValueError as err:
        return None, str(err)


def wrong(value: object) -> Any:
    """A value of the wrong type, passed on purpose (hidden from the type checker)."""
    return value


def raises_naming(field: str) -> pytest.RaisesExc[ValueError]:
    """`pytest.raises` for a ValueError whose message starts with `field=`."""
    return pytest.raises(ValueError, match=rf"^{re.escape(field)}=")
