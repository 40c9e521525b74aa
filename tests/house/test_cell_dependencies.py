"""The cells a widget needs, read from names used and bound (tests/support/cell_dependencies)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.support.cell_dependencies import cell_names, live_cells, unbound_names

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize(("source", "uses", "binds"), [
    ("from m import f\nf()", set(), {"f"}),  # bound before it is used: no earlier cell
    ("x = f(x)", {"f", "x"}, {"x"}),  # read before the cell binds it
    ("for r in rows:\n    print(r)", {"rows"}, {"r"}),  # a loop's target is no use
    ("[v.n for v in vs]", {"vs"}, set()),  # nor is a comprehension's variable
    ("def g(a):\n    return h + k + a\nh = 1", {"k"}, {"g", "h"}),  # bodies: read when called
    ("dashboard({'c': w}, lambda c: view(c))", {"dashboard", "w", "view"}, set()),
    ("cfg.x = 1\nrows[0] = 2", {"cfg", "rows"}, {"cfg", "rows"}),  # mutated: a new binding
    ("import a.b as c, d.e\nwith open(p) as fh:\n    t = fh.read()",
     {"open", "p"}, {"c", "d", "fh", "t"}),
    ("try:\n    y = z\nexcept KeyError as err:\n    print(err)", {"z", "KeyError", "print"},
     {"y", "err"}),
    ("class K(Base):\n    size = n", {"Base", "n"}, {"K"}),
    ("%time y = 1", {"get_ipython"}, set()),  # a magic's text is not read
])
def test_cell_names(source: str, uses: set[str], binds: set[str]) -> None:
    names = cell_names(source)
    assert names.uses - {"print"} == uses - {"print"}
    assert names.binds == binds


def test_live_cells_follow_the_latest_binding_transitively() -> None:
    sources = [
        "session = setup(seed=0)",  # 0: always run
        "data = load()",  # 1: shadowed by cell 3 for the widget
        "result = long_real_run(data)",  # 2: nothing live needs it
        "data = small()\nscale = 2",  # 3
        "from w import explorer",  # 4
        "def view(d):\n    return d * scale",  # 5: uses scale when called
        "explorer(view, data)",  # 6: the widget
        "after = explorer",  # 7: later cells never run
    ]
    assert live_cells(sources, [6]) == [0, 3, 4, 5, 6]
    assert live_cells(sources, []) == [0]
    assert unbound_names(sources, [0, 4, 6]) == {0: {"setup"}, 6: {"view", "data"}}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_name_a_notebook_uses_is_bound_by_an_earlier_cell(notebook: Path) -> None:
    """Run in order, every cell finds what it uses; and so does a live selection of the
    cells that mention widgets. A name the analysis cannot place shows up here first."""
    sources = [c.source for c in nbformat.read(notebook, as_version=4).cells
               if c.cell_type == "code"]
    assert unbound_names(sources, list(range(len(sources)))) == {}
    widgets = [k for k, s in enumerate(sources) if "widgets" in s or "dashboard" in s]
    assert unbound_names(sources, live_cells(sources, widgets)) == {}
    assert "setup(" in sources[0], "the first code cell is the live selection's setup"
