"""Checks that a figure shows its data: what the browser test and the figure tests assert.

`figure_problems(fig)` reads a plotly figure (a `go.Figure` or its dict) and returns
sentences, one per problem a learner would see:

- an axis whose range leaves the data in under `MIN_DATA_SHARE` of the plot (the rest is
  empty space, so the bars are slivers or run off the edge);
- a log axis spanning more than `MAX_LOG_DECADES` decades;
- a trace or a panel (a pair of axes) with no data to draw;
- a table header wider than its column (cut off when drawn);
- a title that does not say where the numbers come from (measured, re-enacted,
  simulated, published, recorded, torch source).

Where a figure leaves an axis on autorange, the range is worked out the way plotly.js
does it: the data, bars from their base, annotations and shapes placed on that axis.
A log axis's annotations are placed in log10 units (plotly's rule) and its shapes in data
units. The browser test passes the ranges plotly.js really drew (`drawn_ranges`), so the
same rules judge both.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dpsim.viz.style import SOURCE_WORDS

MIN_DATA_SHARE = 0.10  # the data must span at least this share of an axis
MAX_LOG_DECADES = 8.0  # a log axis may span at most this many powers of ten
CHAR_PX = 7.0  # width of one character of a 12 px table header, in pixels
DEFAULT_WIDTH_PX = 900.0  # a figure without a width is drawn this wide in a notebook

Range = tuple[float, float]


def title_of(spec: Mapping[str, Any]) -> str:
    """The figure's title text (subtitle included), '' when it has none."""
    title = (spec.get("layout") or {}).get("title") or ""
    return str(title.get("text") or "") if isinstance(title, Mapping) else str(title)


def source_problem(title: str) -> str | None:
    """None when the title says where its numbers come from (one of SOURCE_WORDS)."""
    if any(word in title.lower() for word in SOURCE_WORDS):
        return None
    return (f"the title '{title}' does not say where its numbers come from (one of "
            f"{', '.join(SOURCE_WORDS)})")


def decoded(values: Any) -> Any:
    """A plotly typed array ({'dtype': 'f8', 'bdata': base64}, as plotly 6 writes numpy
    arrays into JSON) as a list; anything else unchanged."""
    if isinstance(values, Mapping) and "bdata" in values:
        array = np.frombuffer(base64.b64decode(values["bdata"]), dtype=values.get("dtype", "f8"))
        return array.tolist()
    return values


def _numbers(values: Any) -> list[float]:
    """The finite numbers among `values` (strings, None and NaN dropped)."""
    values = decoded(values)
    if values is None or isinstance(values, (str, bytes)):
        return []
    if not isinstance(values, Iterable):
        values = [values]
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out.append(float(v))
    return out


def _axis_key(ref: str, letter: str) -> str:
    """'x2' -> 'xaxis2', 'y' -> 'yaxis'."""
    return f"{letter}axis{ref[1:]}"


def _to_axis(values: Sequence[float], log: bool) -> list[float]:
    """Values in the axis's own units: log10 on a log axis (non-positive values dropped)."""
    return [math.log10(v) for v in values if v > 0] if log else list(values)


def _bar_extent(trace: Mapping[str, Any], horizontal: bool) -> list[float]:
    """Both ends of every bar along its value axis."""
    values = _numbers(trace.get("x" if horizontal else "y"))
    base = decoded(trace.get("base"))
    bases = _numbers(base) if isinstance(base, (list, tuple)) else [float(base or 0.0)]
    if len(bases) == 1:
        bases = bases * len(values)
    ends = [b + v for b, v in zip(bases, values, strict=False)]
    return bases[: len(ends)] + ends


def _trace_extents(trace: Mapping[str, Any], stacked: bool) -> dict[str, list[float]]:
    """Numbers a trace puts on its x and y axes ('x', 'y'), in data units."""
    kind = trace.get("type", "scatter")
    if kind == "bar":
        horizontal = trace.get("orientation") == "h"
        value_axis, position_axis = ("x", "y") if horizontal else ("y", "x")
        values = _bar_extent(trace, horizontal)
        if stacked and not trace.get("base"):
            values = [0.0, *values]
        return {value_axis: values, position_axis: _numbers(trace.get(position_axis))}
    if kind in ("scatter", "scattergl"):
        return {"x": _numbers(trace.get("x")), "y": _numbers(trace.get("y"))}
    return {}


def is_guide(trace: Mapping[str, Any]) -> bool:
    """A straight reference line (a limit, a crossover): drawn as lines only, constant in x
    or in y. It is not data: the data must fill the axis without it."""
    if trace.get("type", "scatter") not in ("scatter", "scattergl"):
        return False
    if "markers" in str(trace.get("mode", "lines")) or "lines" not in str(
            trace.get("mode", "lines")):
        return False
    xs, ys = _numbers(trace.get("x")), _numbers(trace.get("y"))
    return len(set(xs)) == 1 or len(set(ys)) == 1


def _has_points(trace: Mapping[str, Any]) -> bool:
    """True when the trace has something to draw."""
    kind = trace.get("type", "scatter")
    if kind == "table":
        cells = (trace.get("cells") or {}).get("values") or []
        return any(len(col) for col in cells if isinstance(col, (list, tuple)))
    for key in ("x", "y", "z", "values", "labels"):
        value = decoded(trace.get(key))
        if isinstance(value, (list, tuple)) and any(v is not None for v in value):
            return True
    return False


def _filled_by_frames(spec: Mapping[str, Any]) -> set[int]:
    """Indices of the traces that some animation frame gives data."""
    filled: set[int] = set()
    for frame in spec.get("frames") or []:
        frame_data = frame.get("data") or []
        indices = frame.get("traces") or list(range(len(frame_data)))
        filled |= {i for i, tr in zip(indices, frame_data, strict=False) if _has_points(tr)}
    return filled


def _stack_totals(traces: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per value axis, the top of every stack of bars (barmode 'stack')."""
    tops: dict[tuple[str, Any], float] = {}
    for tr in traces:
        if tr.get("type") != "bar":
            continue
        horizontal = tr.get("orientation") == "h"
        value_key, pos_key = ("x", "y") if horizontal else ("y", "x")
        axis = (tr.get("xaxis", "x") if horizontal else tr.get("yaxis", "y"))
        positions = decoded(tr.get(pos_key)) or []
        for pos, v in zip(positions, decoded(tr.get(value_key)) or [], strict=False):
            if isinstance(v, (int, float)) and math.isfinite(v):
                key = (axis, str(pos))
                tops[key] = tops.get(key, 0.0) + float(v)
    out: dict[str, list[float]] = {}
    for (axis, _), top in tops.items():
        out.setdefault(axis, []).append(top)
    return out


def _annotation_values(layout: Mapping[str, Any], ref: str, letter: str) -> list[float]:
    """Positions of annotations placed on axis `ref` (in that axis's own units)."""
    out = []
    for ann in layout.get("annotations") or []:
        if ann.get(f"{letter}ref", ref[0]) == ref:
            out += _numbers(ann.get(letter))
    return out


def _shape_values(layout: Mapping[str, Any], ref: str, letter: str) -> list[float]:
    out = []
    for shape in layout.get("shapes") or []:
        if shape.get(f"{letter}ref", ref[0]) == ref:
            out += _numbers([shape.get(f"{letter}0"), shape.get(f"{letter}1")])
    return out


def _as_dict(fig: Any) -> dict[str, Any]:
    return fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else dict(fig)


def axis_problem(name: str, data: Range, shown: Range, log: bool) -> str | None:
    """What is wrong with one axis showing `data` (lo, hi) inside `shown` (lo, hi), both in
    the axis's own units (log10 on a log axis); None when it reads fine."""
    lo, hi = min(shown), max(shown)
    if log and hi - lo > MAX_LOG_DECADES:
        return (f"{name}: the log axis spans {hi - lo:.0f} decades (at most "
                f"{MAX_LOG_DECADES:g} read well)")
    span = hi - lo
    if span <= 0:
        return None
    inside = max(0.0, min(data[1], hi) - max(data[0], lo))
    if data[1] - data[0] <= 0:  # one value: it must at least be on the axis
        return None if lo <= data[0] <= hi else f"{name}: the data lies outside the axis range"
    if inside / (data[1] - data[0]) < 0.5:
        return f"{name}: most of the data lies outside the axis range [{lo:.3g}, {hi:.3g}]"
    if not log:  # a level is read from zero: a flat line near the top reads fine
        data = (min(data[0], 0.0), max(data[1], 0.0))
        inside = max(0.0, min(data[1], hi) - max(data[0], lo))
    if inside / span < MIN_DATA_SHARE:
        return (f"{name}: the data fills {100 * inside / span:.0f} % of the axis (at least "
                f"{100 * MIN_DATA_SHARE:.0f} % should)")
    return None


# long: one pass over every axis of the figure, each check a few lines
def figure_problems(fig: Any, drawn_ranges: Mapping[str, Range] | None = None,
                    may_be_empty: Iterable[str] = ()) -> list[str]:
    """Every problem of `fig` a learner would see (empty list: it reads fine).

    `drawn_ranges` maps an axis ('xaxis', 'yaxis2', ...) to the range plotly.js drew, in
    the axis's units; without it, ranges are the figure's own or worked out like
    plotly's autorange. Traces named in `may_be_empty` may have no data.
    """
    spec = _as_dict(fig)
    data: list[Mapping[str, Any]] = list(spec.get("data") or [])
    layout: Mapping[str, Any] = spec.get("layout") or {}
    allowed = set(may_be_empty)
    animated = _filled_by_frames(spec)
    problems: list[str] = []
    if not data:
        return ["the figure has no traces"]
    named = source_problem(title_of(spec))
    if named:
        problems.append(named)
    stacked = layout.get("barmode") == "stack"
    tops = _stack_totals(data) if stacked else {}
    per_axis: dict[str, list[float]] = {}
    guides: dict[str, list[float]] = {}  # reference lines: in the autorange, not the data
    panels: dict[tuple[str, str], bool] = {}
    for i, tr in enumerate(data):
        name = tr.get("name") or f"trace {i}"
        if tr.get("type") == "table":
            problems += _table_problems(tr, layout)
        points = _has_points(tr)
        if (not points and name not in allowed and i not in animated
                and tr.get("visible") is not False):
            problems.append(f"trace '{name}' has no data")
        if tr.get("type") in ("table", "pie", "sunburst", "treemap"):  # no axes
            continue
        xref, yref = tr.get("xaxis", "x"), tr.get("yaxis", "y")
        panels[(xref, yref)] = panels.get((xref, yref), False) or points or i in animated
        target = guides if is_guide(tr) else per_axis
        for letter, values in _trace_extents(tr, stacked).items():
            ref = xref if letter == "x" else yref
            target.setdefault(ref, []).extend(values)
    for ref, values in tops.items():
        per_axis.setdefault(ref, []).extend(values)
    for (xref, yref), has_data in panels.items():
        if not has_data:
            problems.append(f"the panel on axes {xref}/{yref} is empty")
    for ref, values in sorted(per_axis.items()):
        key = _axis_key(ref, ref[0])
        axis = layout.get(key) or {}
        if axis.get("type") in ("category", "multicategory", "date"):
            continue
        log = axis.get("type") == "log"
        own = _to_axis(values, log)
        if not own:
            continue
        data_range = (min(own), max(own))
        around = own + _to_axis(guides.get(ref, []), log)
        shown = _shown_range(axis, around, layout, ref, log, drawn_ranges, key)
        problem = axis_problem(key, data_range, shown, log)
        if problem:
            problems.append(problem)
    return problems


def _shown_range(axis: Mapping[str, Any], own: list[float], layout: Mapping[str, Any],
                 ref: str, log: bool, drawn: Mapping[str, Range] | None, key: str) -> Range:
    """The range the axis shows: drawn by the browser, set by the figure, or autorange."""
    if drawn and key in drawn:
        lo, hi = drawn[key]
        return float(lo), float(hi)
    fixed = axis.get("range")
    if isinstance(fixed, (list, tuple)) and len(fixed) == 2 and all(
            isinstance(v, (int, float)) for v in fixed):
        return float(fixed[0]), float(fixed[1])
    letter = ref[0]
    extra = _annotation_values(layout, ref, letter)
    extra += _to_axis(_shape_values(layout, ref, letter), log)
    values = own + extra
    return min(values), max(values)


def _table_problems(trace: Mapping[str, Any], layout: Mapping[str, Any]) -> list[str]:
    """Headers wider than their columns (estimated at CHAR_PX per character)."""
    header = (trace.get("header") or {}).get("values") or []
    if not header:
        return []
    width = float(layout.get("width") or DEFAULT_WIDTH_PX)
    margin = layout.get("margin") or {}
    width -= float(margin.get("l", 80)) + float(margin.get("r", 80))
    weights = trace.get("columnwidth") or [1.0] * len(header)
    if not isinstance(weights, (list, tuple)):
        weights = [float(weights)] * len(header)
    total = sum(float(w) for w in weights) or 1.0
    out = []
    for text, w in zip(header, weights, strict=False):
        words = re.sub(r"<[^>]+>", " ", str(text)).split()
        longest = max((len(word) for word in words), default=0)
        column_px = width * float(w) / total - 16  # cell padding
        if longest * CHAR_PX > column_px:
            out.append(f"table header '{text}' is wider than its column "
                       f"({longest * CHAR_PX:.0f} px > {column_px:.0f} px)")
    return out
