"""The one way the kit shows a table: readable headers with units, numbers formatted.

`Column` says how one field reads: its header in words with the unit ("step (ms)"), a
scale (bytes -> GiB) and a number format. `table_figure` draws rows as a plotly table
whose columns are wide enough for their longest word and whose height fits every row;
`text_table` prints the same rows as aligned text (for printed measurements).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

CHAR_PX = 7.0  # width of one character at the table's 12 px font, pixels
LINE_PX = 18.0  # height of one line of cell text, pixels
MAX_COLUMN_CHARS = 28  # longer cell text wraps at about this many characters
WIDTH_PX = 900.0  # the width a notebook draws a figure at


@dataclass(frozen=True)
class Column:
    """How one field of a row is shown."""

    key: str  # the row's field
    header: str  # words and unit, e.g. "memory per device (GiB)"
    fmt: str = ""  # format spec for numbers (",.1f"), "sig" (3 significant digits, no
    # exponent) or "" (as they are)
    scale: float = 1.0  # the number is divided by this first (e.g. 1024**3 for GiB)

    def text(self, value: object) -> str:
        """`value` as this column shows it."""
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, (int, float)) and self.fmt:
            number = value / self.scale if self.scale != 1.0 else value
            if isinstance(number, float) and not math.isfinite(number):
                return str(number)
            return significant(number) if self.fmt == "sig" else format(number, self.fmt)
        return "" if value is None else str(value)


def significant(number: float, digits: int = 3) -> str:
    """A number with `digits` significant digits, never in exponent form: 2634.9 -> '2,635',
    0.43612 -> '0.436', 0 -> '0'."""
    if number == 0 or not math.isfinite(number):
        return str(number if number else 0)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(number))))
    return f"{number:,.{decimals}f}"


def _cells(rows: Sequence[Mapping[str, object]], columns: Sequence[Column]) -> list[list[str]]:
    for name, value in (("rows", rows), ("columns", columns)):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{name}={value!r} is not allowed; give a list")
    if not columns or not all(isinstance(c, Column) for c in columns):
        raise ValueError(f"columns={columns!r} is not allowed; give a non-empty list of Column")
    for i, row in enumerate(rows):
        missing = [c.key for c in columns if c.key not in row]
        if missing:
            raise ValueError(f"rows[{i}]={dict(row)!r} lacks the field(s) {missing}; each row "
                             f"needs {[c.key for c in columns]}")
    return [[c.text(r[c.key]) for r in rows] for c in columns]


def _widths(columns: Sequence[Column], cells: Sequence[Sequence[str]]) -> list[float]:
    """Pixels per column: at least its longest header word, then a share of what is left
    in proportion to how much more its (capped) cell text wants."""
    usable = WIDTH_PX - 20
    least, wants = [], []
    for col, texts in zip(columns, cells, strict=True):
        word = max((len(w) for w in col.header.split()), default=1)
        text = max((min(len(t), MAX_COLUMN_CHARS) for t in texts), default=1)
        least.append(max(word, 3) * CHAR_PX * 1.15 + 16)  # headers are bold
        wants.append(max(text * CHAR_PX + 16, least[-1]))
    if sum(wants) <= usable:
        return [w * usable / sum(wants) for w in wants]
    spare = max(usable - sum(least), 0.0)
    extra = [w - m for w, m in zip(wants, least, strict=True)]
    total_extra = sum(extra) or 1.0
    return [m + spare * e / total_extra for m, e in zip(least, extra, strict=True)]


def table_figure(rows: Sequence[Mapping[str, object]], columns: Sequence[Column], title: str,
                 *, highlight: Callable[[Mapping[str, object]], bool] | None = None
                 ) -> go.Figure:
    """Rows as a plotly table; rows for which `highlight(row)` is true are shaded red."""
    cells = _cells(rows, columns)
    widths = _widths(columns, cells)
    lines = []
    for r in range(len(rows)):
        per_col = [math.ceil(len(cells[c][r]) * CHAR_PX / max(widths[c] - 16, CHAR_PX))
                   for c in range(len(columns))]
        lines.append(max([1, *per_col]))
    header_lines = max(math.ceil(len(c.header) * CHAR_PX * 1.15 / max(w - 16, CHAR_PX))
                       for c, w in zip(columns, widths, strict=True))
    shade = ["#FCBBA1" if highlight and highlight(r) else "white" for r in rows]
    fig = go.Figure(go.Table(
        columnwidth=widths,
        header={"values": [f"<b>{c.header}</b>" for c in columns], "align": "left",
                "fill_color": "#EEEEEE"},
        cells={"values": cells, "align": "left", "fill_color": [shade] * len(columns)}))
    height = 70 + LINE_PX * (header_lines + 1) + sum(LINE_PX * (n + 0.8) for n in lines)
    fig.update_layout(title={"text": title}, height=round(height),
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def text_table(rows: Sequence[Mapping[str, object]], columns: Sequence[Column]) -> str:
    """Rows as aligned plain text under their headers (numbers right-aligned)."""
    cells = _cells(rows, columns)
    out_lines = []
    widths = [max([len(c.header), *(len(t) for t in texts)])
              for c, texts in zip(columns, cells, strict=True)]
    out_lines.append("  ".join(c.header.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in range(len(rows)):
        parts = []
        for c, (col, w) in enumerate(zip(columns, widths, strict=True)):
            value = rows[r][col.key]
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            parts.append(cells[c][r].rjust(w) if number else cells[c][r].ljust(w))
        out_lines.append("  ".join(parts).rstrip())
    return "\n".join(out_lines)
