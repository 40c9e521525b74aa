"""The course's site, without a browser: pages made from notebooks, provenance, the build's
inputs and entry points (the browser test, tests/browser/test_site.py, opens the built site)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import ipywidgets as widgets
import nbformat
import plotly.graph_objects as go
import pytest

from dpsim.course.website import build, execute, pages, provenance, serve
from dpsim.widgets.dashboard import STILL_CLASS, STILL_NOTE, dashboard

ROOT = Path(__file__).resolve().parents[2]


def _figure_output(width: int | None = None) -> nbformat.NotebookNode:
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[4, 5, 6]), layout={"width": width})
    return nbformat.v4.new_output("display_data", data={
        pages.PLOTLY_MIME: json.loads(fig.to_json()), "text/plain": "Figure()"})


def _notebook(*cells: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 5 · A chapter\n\nIntro."), *cells]
    return nb


def test_a_figure_becomes_a_div_drawn_by_the_pages_plotly() -> None:
    """The figure's JSON goes into a <div> and a Plotly.newPlot call, with no plotly.js of
    its own and no fixed width; every figure of a page gets its own id."""
    code = nbformat.v4.new_code_cell("fig", outputs=[_figure_output(1400), _figure_output()])
    page = pages.chapter_page(_notebook(code), "05_ddp", "NOTE")
    html = [o.data["text/html"] for o in page.cells[1].outputs]
    assert [list(o.data) for o in page.cells[1].outputs] == [["text/html"], ["text/html"]]
    assert 'id="05_ddp-figure-1"' in html[0]
    assert 'id="05_ddp-figure-2"' in html[1]
    assert "Plotly.newPlot" in html[0]
    assert "1400" not in html[0]  # the fixed width is gone: the page sets it
    assert len(html[0]) < 20_000  # no plotly.js inside (it is 4.8 MB)


def test_an_animation_waits_at_its_first_frame() -> None:
    """As in JupyterLab: plotly's to_html would play it on load, and a page screenshot or a
    reader would meet it mid-way (chapter 2's ring, with an empty heatmap)."""
    fig = go.Figure(go.Scatter(x=[0], y=[0]), frames=[go.Frame(data=[go.Scatter(x=[1], y=[1])])])
    html = pages.figure_html(json.loads(fig.to_json()), "ring")
    assert "addFrames" in html
    assert "Plotly.animate" not in html


def test_the_banner_goes_under_the_title_and_test_markers_go() -> None:
    code = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(1)\n  # NBVAL_IGNORE_OUTPUT")
    page = pages.chapter_page(_notebook(code), "x", "BANNER LINE")
    assert page.cells[0].source.startswith("# 5 · A chapter\n\nBANNER LINE")
    assert page.cells[0].source.endswith("Intro.")
    assert page.cells[1].source == "print(1)"
    assert page.metadata["language_info"]["pygments_lexer"] == "ipython3"


def test_a_dashboard_shows_its_still_picture_never_a_widget() -> None:
    """The still picture the dashboard carries replaces the widget view; kept in metadata
    (an executed copy of the test suite) it comes back; with none, a note says where to run."""
    box = dashboard({"n": widgets.IntSlider(value=3, description="N ranks")},
                    lambda n: [f"n is {n}", go.Figure(go.Bar(x=[1], y=[n]))])
    bundle = box._repr_mimebundle_()
    assert pages.WIDGET_MIME in bundle
    still = bundle["text/html"]
    for part in (STILL_CLASS, STILL_NOTE, "N ranks = 3", "n is 3", "Plotly.newPlot"):
        assert part in still
    live = nbformat.v4.new_output("display_data", data=dict(bundle))
    stray = nbformat.v4.new_output("stream", name="stdout", text="n is 3\n")  # no front end
    kept = nbformat.v4.new_code_cell("board()")
    kept.metadata[pages.STILL_KEY] = [stray, live]  # as the kernel sent them
    bare = nbformat.v4.new_code_cell("board()", outputs=[nbformat.v4.new_output(
        "display_data", data={pages.WIDGET_MIME: {"model_id": "x"}, "text/plain": "VBox()"})])
    page = pages.chapter_page(_notebook(nbformat.v4.new_code_cell("board()",
                                                                  outputs=[stray, live]),
                                        kept, bare), "x", "")
    shown = [o.data for c in page.cells[1:] for o in c.outputs]
    assert shown == [{"text/html": still}, {"text/html": still}, {"text/html": pages.NO_STILL}]
    assert pages.STILL_KEY not in page.cells[2].metadata


def test_the_still_picture_names_each_selection_by_its_label() -> None:
    box = dashboard({"k": widgets.SelectionSlider(options=[("model's", 0), ("1,000", 1000)],
                                                  value=0, description="outputs"),
                     "m": widgets.Dropdown(options=["a", "b"], value="b", description="m")},
                    lambda k, m: f"{k}{m}")
    still = box._repr_mimebundle_()["text/html"]
    assert "outputs = model&#x27;s, m = b" in still


def test_a_moved_control_changes_the_still_picture() -> None:
    slider = widgets.IntSlider(value=3, description="N")
    box = dashboard({"n": slider}, lambda n: f"n is {n}")
    slider.value = 5
    assert "n is 5" in box._repr_mimebundle_()["text/html"]


def test_exercise_pages_have_no_outputs_and_say_how_to_run() -> None:
    code = nbformat.v4.new_code_cell("check()", outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="PASS")])
    page = pages.exercise_page(_notebook(code), "05_ddp.ipynb")
    assert page.cells[1].outputs == []
    assert "`exercises/05_ddp.ipynb`" in page.cells[0].source


def test_provenance_names_the_machine_and_each_recorded_gpu(tmp_path: Path) -> None:
    none = provenance.this_machine(tmp_path)
    assert none.gpu_records == ()
    assert "none recorded yet" in none.banner("../_raw/notebooks/05_ddp.ipynb")
    (tmp_path / "gpu_h100.json").write_text(json.dumps(
        {"machine": {"gpu": "NVIDIA H100 80GB HBM3"}}))
    banner = provenance.this_machine(tmp_path).banner("../_raw/notebooks/05_ddp.ipynb")
    assert "recorded on NVIDIA H100 80GB HBM3 (gpu_h100.json)" in banner
    assert f"({none.cores} CPU cores" in banner
    assert "torch " in banner
    assert "{download}`05_ddp.ipynb <../_raw/notebooks/05_ddp.ipynb>`" in banner


def test_a_notebook_runs_again_only_when_it_or_dpsim_changed(tmp_path: Path) -> None:
    notebook, library = tmp_path / "a.ipynb", tmp_path / "lib"
    library.mkdir()
    (library / "m.py").write_text("x = 1\n")
    nbformat.write(_notebook(), notebook)
    key = execute.run_key(notebook, library)
    copy = tmp_path / "cache" / "a.ipynb"
    assert not execute.cached(copy, key)
    copy.parent.mkdir()
    done = _notebook()
    done.metadata[execute.CACHE_KEY] = {"key": key}
    nbformat.write(done, copy)
    assert execute.cached(copy, key)
    (library / "m.py").write_text("x = 2\n")
    assert execute.run_key(notebook, library) != key


def test_entry_points_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"executed=.*lacks a\.ipynb"):
        execute.copies_from(tmp_path, [tmp_path / "a.ipynb"])
    with pytest.raises(ValueError, match="jobs=0"):
        build.main(str(tmp_path / "site"), None, 0, ROOT)
    with pytest.raises(ValueError, match=r"executed=.*is not a folder"):
        build.main(str(tmp_path / "site"), str(tmp_path / "none"), 2, ROOT)
    with pytest.raises(ValueError, match=r"folder=.*no index\.html"):
        serve.server(tmp_path)


def test_the_source_folder_holds_every_page_and_no_answer(tmp_path: Path) -> None:
    """assemble() from the committed notebooks: a page per chapter and exercise, the
    landing page's table and tables of contents filled, plotly.js beside them, and nothing
    from solutions/."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    src = tmp_path / "src"
    build.assemble(ROOT, src, {n.name: n for n in notebooks}, provenance.this_machine(tmp_path))
    assert sorted(p.name for p in (src / "chapters").iterdir()) == [n.name for n in notebooks]
    exercises = sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    assert sorted(p.name for p in (src / "exercises").glob("*.ipynb")) == exercises
    landing = (src / "index.md").read_text()
    assert "{{" not in landing
    assert re.search(r"\| 5 \| \[.*\]\(chapters/05_ddp\.ipynb\)", landing)
    assert "chapters/11_how_far_to_trust_dpsim" in landing
    assert (src / "_static" / "plotly.min.js").stat().st_size > 1_000_000
    assert not any("solutions" in p.parts for p in src.rglob("*"))
    chapter = nbformat.read(src / "chapters" / "05_ddp.ipynb", as_version=4)
    assert "Where the numbers on this page come from" in chapter.cells[0].source


def test_the_sites_own_code_does_not_rerun_the_notebooks(tmp_path: Path) -> None:
    notebook = tmp_path / "a.ipynb"
    nbformat.write(_notebook(), notebook)
    library = tmp_path / "dpsim"
    (library / "course" / "website").mkdir(parents=True)
    (library / "a.py").write_text("x = 1\n")
    (library / "course" / "website" / "pages.py").write_text("y = 1\n")
    before = execute.run_key(notebook, library)
    (library / "course" / "website" / "pages.py").write_text("y = 2\n")
    assert execute.run_key(notebook, library) == before
    (library / "a.py").write_text("x = 2\n")
    assert execute.run_key(notebook, library) != before


@pytest.mark.slow
def test_a_failing_notebook_stops_the_build_with_its_traceback(tmp_path: Path) -> None:
    """Run in a process and a kernel of its own, a notebook whose cell raises stops the
    build with the notebook's name and the cell's error, and leaves no copy behind."""
    path = tmp_path / "bad.ipynb"
    nbformat.write(_notebook(nbformat.v4.new_code_cell("raise ValueError('cell says no')")),
                   path)
    library = tmp_path / "lib"
    library.mkdir()
    with pytest.raises(RuntimeError, match=r"(?s)bad\.ipynb failed to run.*cell says no"):
        execute.run_all([path], tmp_path / "cache", library, say=False)
    assert not (tmp_path / "cache" / "bad.ipynb").exists()
