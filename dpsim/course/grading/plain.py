"""Answers as plain data: the only thing that crosses from the sandbox to the grader.

The sandbox turns what the learner's function returned into plain values (`to_plain`:
bool, int, float, str, None, lists, and dicts of those; tensors and numpy arrays as nested
lists) and writes them as one JSON line (`encode`). The grader reads that text with
`decode`, which builds nothing but those plain Python types: no object of the learner's
(an int subclass whose `__eq__` is always True, a tensor subclass, a pickle payload) can
reach the comparison. JSON objects carry string keys only, so dicts travel tagged as
`{"dict": [[key, value], ...]}`, and list keys come back as tuples.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 40  # nesting of lists and dicts in an answer
_DICT = "dict"


class NotPlain(TypeError):
    """The learner's function returned something that is not plain data."""


def to_plain(value: Any, depth: int = 0) -> Any:
    """`value` as plain Python data (runs in the sandbox; best effort for honest answers)."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"your answer is nested more than {MAX_DEPTH} levels deep")
    if value is None or isinstance(value, bool):
        return None if value is None else bool(value)
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if hasattr(value, "tolist") and hasattr(value, "shape"):  # torch tensors, numpy arrays
        if hasattr(value, "detach"):
            value = value.detach().cpu()
        return to_plain(value.tolist(), depth + 1)
    if hasattr(value, "item") and type(value).__module__ == "numpy":  # numpy scalars
        return to_plain(value.item(), depth + 1)
    if isinstance(value, (list, tuple)):
        return [to_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        out = {_key(to_plain(k, depth + 1)): to_plain(v, depth + 1) for k, v in value.items()}
        if any(isinstance(k, dict) for k in out):
            raise NotPlain("your answer has a dict as a dict key")
        return out
    raise NotPlain(f"your function returned a {type(value).__name__}; return numbers, "
                   "strings, lists, dicts or tensors")


def _key(key: Any) -> Any:
    return tuple(_key(k) for k in key) if isinstance(key, list) else key


def _tag(value: Any) -> Any:
    if isinstance(value, dict):
        return {_DICT: [[_untuple(k), _tag(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_tag(v) for v in value]
    return value


def _untuple(key: Any) -> Any:
    return [_untuple(k) for k in key] if isinstance(key, tuple) else key


def encode(value: Any) -> str:
    """One line of JSON for a plain value (as `to_plain` makes them)."""
    return json.dumps(_tag(value), separators=(",", ":"))


def decode(text: str | bytes) -> Any:
    """Plain Python data from `encode`'s text; ValueError for anything else."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not plain JSON: {type(exc).__name__}") from None
    return _untag(raw, 0)


def _untag(raw: Any, depth: int) -> Any:
    if depth > MAX_DEPTH + 2:
        raise ValueError("nested too deeply")
    if raw is None or type(raw) in (bool, int, str):
        return raw
    if type(raw) is float:
        return raw
    if type(raw) is list:
        return [_untag(v, depth + 1) for v in raw]
    if type(raw) is dict and list(raw) == [_DICT] and type(raw[_DICT]) is list:
        out = {}
        for pair in raw[_DICT]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("a dict entry is not a [key, value] pair")
            key = _key(_untag(pair[0], depth + 1))
            if isinstance(key, dict):
                raise ValueError("a dict key is a dict")
            out[key] = _untag(pair[1], depth + 1)
        return out
    raise ValueError(f"unexpected JSON value of type {type(raw).__name__}")
