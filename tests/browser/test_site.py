"""The course's static site (dpsim.course.website), built and opened in headless Chromium.

The site is built once per module from the executed copies the nbval run of this session
wrote (tests/support/executed_notebooks.py), so no notebook runs twice; run alone (nbval
not in the session), the notebooks run here first (minutes; cached in build/site-executed).
Then every page is opened, served from 127.0.0.1, at 1280 px, and checked: no console
error, no failed request, every figure drawn with data, no sideways scroll, every internal
link resolves, and search finds "bucket_cap_mb".
"""

from __future__ import annotations

import html
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab_driver import REPO_ROOT

from dpsim.course.website.build import SiteReport, build_site
from dpsim.course.website.serve import server
from tests.support.executed_notebooks import executed_path

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
EXERCISES = sorted((REPO_ROOT / "exercises").glob("*.ipynb"))
PAGES = (["index.html", "exercises/index.html"]
         + [f"chapters/{p.stem}.html" for p in NOTEBOOKS]
         + [f"exercises/{p.stem}.html" for p in EXERCISES])
SITE_GOAL_BYTES = 30_000_000  # the size goal for the whole site
# How long the site waits for the nbval run (other worker) to write the last executed copy.
COPIES_WAIT_S = float(os.environ.get("DPSIM_SITE_COPIES_WAIT_S", "600"))
# Screenshots of three pages, into artifacts/site-screenshots/: the landing page at
# its top, a chapter at its first dashboard (else its first figure). The README's copies in
# docs/screenshots/ are refreshed only on request: DPSIM_DOCS_SCREENSHOTS=1.
SHOTS = {"index.html": "site_landing.png", "chapters/05_ddp.html": "site_chapter_05.png",
         "chapters/07_choosing_a_strategy.html": "site_chapter_07.png"}
SHOTS_DIR = REPO_ROOT / "artifacts" / "site-screenshots"
DOCS_SHOTS_DIR = REPO_ROOT / "docs" / "screenshots"

# Every plotly figure on the page: drawn by plotly.js, with data, not an empty frame.
FIGURES_JS = """() => [...document.querySelectorAll('.plotly-graph-div')].map(d => ({
  id: d.id,
  drawn: !!d.querySelector('.main-svg'),
  traces: (d._fullData || []).length,
  points: (d._fullData || []).reduce((n, t) => n + ((t.x || t.values || t.cells?.values
           || t.z || t.y || []).length || 0), 0),
  width: d.getBoundingClientRect().width, height: d.getBoundingClientRect().height,
  frames: ((d._transitionData || {})._frames || []).length,
  step: ((d.layout || {}).sliders || [{}])[0].active ?? null }))"""


@dataclass
class SiteResult:
    """One line for the browser test's summary (tests/browser/conftest.py)."""

    report: SiteReport
    notes: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)

    def summary(self) -> str:
        return self.report.describe()


@pytest.fixture(scope="module")
def built(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> SiteReport:
    """The site, built from this session's executed copies (or from runs made here)."""
    out = tmp_path_factory.mktemp("site") / "site"
    in_session = {Path(str(i.path)) for i in request.session.items
                  if getattr(i, "cell_num", None) is not None}
    if all(n in in_session for n in NOTEBOOKS):
        folder = executed_path(NOTEBOOKS[0]).parent
        deadline = time.monotonic() + COPIES_WAIT_S
        while (not all(executed_path(n).exists() for n in NOTEBOOKS)
               and time.monotonic() < deadline):
            time.sleep(1.0)
        missing = [n.name for n in NOTEBOOKS if not executed_path(n).exists()]
        assert not missing, (f"nbval runs every notebook in this session, but no executed "
                             f"copy of {missing} appeared within {COPIES_WAIT_S:.0f} s")
        return build_site(REPO_ROOT, out, executed=folder, say=False)
    return build_site(REPO_ROOT, out, say=False)


@pytest.fixture(scope="module")
def site_url(built: SiteReport) -> Iterator[str]:
    """The built site served on 127.0.0.1 (python -m dpsim site serve's server)."""
    httpd = server(built.out, 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.browser
@pytest.mark.slow
def test_the_site_is_every_page_and_small(built: SiteReport, record_result: Any) -> None:
    """The build made one page per chapter and exercise notebook, under the size goal."""
    made = {p.relative_to(built.out).as_posix() for p in built.out.rglob("*.html")
            if "_static" not in p.relative_to(built.out).parts}  # the theme's own files
    assert set(PAGES) <= made, sorted(set(PAGES) - made)
    stray = made - set(PAGES) - {"search.html", "genindex.html"}
    assert not stray, f"pages nothing links from the course: {sorted(stray)}"
    assert built.total_bytes < SITE_GOAL_BYTES, built.describe()
    record_result(SiteResult(built))


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_page_loads_draws_and_fits(page: str, site_url: str, browser_context: Any) -> None:
    """No console error or failed request; every figure drawn with data; no sideways
    scroll at 1280 px; a chapter says where its numbers come from; a dashboard shows a still
    picture, never an empty box or a widget's repr."""
    tab = browser_context.new_page()
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
           if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    tab.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    tab.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}")
           if r.status >= 400 else None)
    try:
        tab.goto(site_url + page, wait_until="load")  # figures are drawn as their <div> loads
        figures = tab.evaluate(FIGURES_JS)
        if any(f["frames"] for f in figures):  # an animation left to play would move on now
            tab.wait_for_timeout(1500)
            figures = tab.evaluate(FIGURES_JS)
        width = tab.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        text = tab.inner_text("main")
        stills = tab.locator(".dpsim-dashboard-still").count()
        loads_plotly = tab.locator("head script[src*='plotly.min.js']").count()
        if page in SHOTS:
            _screenshot(tab, SHOTS[page])
    finally:
        tab.close()
    assert not problems, "\n".join(problems)
    empty = [f for f in figures if not (f["drawn"] and f["traces"] and f["points"]
                                         and f["width"] > 100 and f["height"] > 100)]
    assert not empty, f"figures not drawn, or drawn without data: {empty}"
    playing = [f["id"] for f in figures if f["frames"] and f["step"] not in (0, None)]
    assert not playing, f"animations not at their first frame: {playing}"
    assert width[0] <= width[1], f"the page is {width[0]} px wide in a {width[1]} px window"
    for raw in ("VBox(", "HBox(", "application/vnd.jupyter.widget-view+json",
                "Figure({", "NotebookNode"):
        assert raw not in text, f"{page} shows a raw {raw!r}"
    assert (loads_plotly > 0) == bool(figures), "plotly.js is loaded where figures are, only"
    if page.startswith("chapters/"):
        notebook = REPO_ROOT / "notebooks" / f"{Path(page).stem}.ipynb"
        assert "Where the numbers on this page come from" in text
        assert stills == _dashboards(notebook), "a dashboard without its still picture"
        n_figures = _figures_in_copy(notebook)
        if n_figures is not None:
            assert len(figures) >= n_figures, (len(figures), n_figures)


@pytest.mark.browser
@pytest.mark.slow
def test_every_internal_link_resolves(built: SiteReport) -> None:
    """Every href and src inside the site names a file of the site (and an anchor on it)."""
    broken = []
    ids: dict[Path, set[str]] = {}
    for page in sorted(built.out.rglob("*.html")):
        if "_static" in page.relative_to(built.out).parts:
            continue  # the theme's Jinja macro files, which no page links
        links = _Links()
        links.feed(page.read_text())
        for ref in links.refs:
            url = urllib.parse.urlsplit(ref)
            if url.scheme or url.netloc or ref.startswith(("mailto:", "javascript:")):
                continue
            target = (page.parent / urllib.parse.unquote(url.path)).resolve() if url.path \
                else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or built.out.resolve() not in target.parents:
                broken.append(f"{page.relative_to(built.out)}: {ref}")
            elif url.fragment and target.suffix == ".html":
                if target not in ids:
                    found = _Links()
                    found.feed(target.read_text())
                    ids[target] = found.ids
                if url.fragment not in ids[target]:
                    broken.append(f"{page.relative_to(built.out)}: {ref} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


@pytest.mark.browser
@pytest.mark.slow
def test_search_finds_bucket_cap_mb(site_url: str, browser_context: Any) -> None:
    """The site's search (Sphinx's index, in the browser) finds DDP's bucket size option."""
    tab = browser_context.new_page()
    try:
        tab.goto(site_url + "search.html?q=bucket_cap_mb", wait_until="load")
        tab.wait_for_function("document.querySelectorAll('#search-results li').length > 0",
                              timeout=15_000)
        hits = tab.eval_on_selector_all("#search-results li a", "as => as.map(a => a.href)")
    finally:
        tab.close()
    assert any("chapters/05_ddp.html" in h for h in hits), hits


@pytest.mark.browser
@pytest.mark.slow
def test_exercise_pages_show_no_answer(built: SiteReport) -> None:
    """No line of an answer (between a solution's BEGIN and END SOLUTION markers) is on an
    exercise page, unless the exercise notebook itself writes it (a chapter's page is that
    chapter as it runs in JupyterLab, and may show the code it teaches)."""
    def words(text: str) -> str:  # a Markdown line break is a space on the page
        return " ".join(text.split())

    text = words(" ".join(_plain(p.read_text()) for p in (built.out / "exercises").glob("*.html")))
    given = words(" ".join(c.source for path in (REPO_ROOT / "exercises").glob("*.ipynb")
                           for c in nbformat.read(path, as_version=4).cells))  # its own hints
    answers = 0
    leaked = []
    for solution in sorted((REPO_ROOT / "solutions").glob("*.ipynb")):
        for cell in nbformat.read(solution, as_version=4).cells:
            for block in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source,
                                    re.S):
                for line in (words(ln) for ln in block.splitlines()):
                    if len(line) < 20 or line.startswith("#") or line in given:
                        continue
                    answers += 1
                    if line in text:
                        leaked.append(f"{solution.name}: {line}")
    assert answers > 100  # the check looked at the answers
    assert not leaked, "\n".join(leaked[:20])


def _screenshot(tab: Any, name: str) -> None:
    """The page at its first dashboard or figure (the top when it has neither)."""
    tab.evaluate("""() => { const at = document.querySelector('.dpsim-dashboard-still')
        || document.querySelector('.plotly-graph-div');
        if (at) { at.scrollIntoView({block: 'start'}); window.scrollBy(0, -70); } }""")
    tab.wait_for_timeout(200)
    SHOTS_DIR.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS_DIR / name))
    if os.environ.get("DPSIM_DOCS_SCREENSHOTS") == "1":
        DOCS_SHOTS_DIR.mkdir(parents=True, exist_ok=True)
        (DOCS_SHOTS_DIR / name).write_bytes((SHOTS_DIR / name).read_bytes())


class _Links(HTMLParser):
    """Every href/src of a page, and every id on it."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if (name in ("href", "src") and value and tag != "link") or (
                    tag == "link" and name == "href" and value):
                self.refs.append(str(value))
            if name == "id" and value:
                self.ids.add(value)


def _plain(page: str) -> str:
    """The page's text, tags removed and entities decoded (for finding code lines)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _dashboards(notebook: Path) -> int:
    """How many code cells of `notebook` show a dashboard."""
    nb = nbformat.read(notebook, as_version=4)
    pattern = re.compile(r"^\s*(\w+_explorer\(|strategy_dashboard\(|dashboard\()", re.M)
    return sum(1 for c in nb.cells if c.cell_type == "code" and pattern.search(c.source))


def _figures_in_copy(notebook: Path) -> int | None:
    """How many plotly figures the executed copy of `notebook` holds (None: no copy)."""
    copy = executed_path(notebook)
    if not copy.exists():
        return None
    nb = nbformat.read(copy, as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
               if "application/vnd.plotly.v1+json" in (o.get("data") or {}))
