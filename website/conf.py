"""Sphinx configuration of the course's site (python -m dpsim site build copies this folder
into the build's source folder, next to the pages it makes from the notebooks)."""

project = "dpsim"
author = "the dpsim authors"
copyright = "the dpsim authors, Apache-2.0"

extensions = ["myst_nb", "dpsim.course.website.mathml"]
nb_execution_mode = "off"  # the notebooks ran before the build (dpsim.course.website.execute)
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
html_math_renderer = "mathml"  # MathML written at build time: no MathJax, no CDN

exclude_patterns = ["_raw/**", "**.ipynb_checkpoints"]
# a %%writefile cell holding a job script (chapter 12) is lexed as Python first, then shown
# in relaxed mode: that fallback is what the page should do, not a build error
suppress_warnings = ["misc.highlighting_failure"]
html_theme = "sphinx_book_theme"
html_title = "dpsim: data-parallel training, run, simulated and seen"
html_static_path = ["_static"]
html_css_files = ["dpsim.css"]
html_copy_source = False  # each page links its source notebook itself (its note)
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "navigation_with_keys": False,
}
html_context = {"default_mode": "light"}  # the theme reads it; unset, it logs an error
html_favicon = "_static/favicon.svg"  # also spares the browser a request for /favicon.ico


def _plotly_where_figures_are(app, pagename, templatename, context, doctree):
    """Load the site's own plotly.js (4.8 MB) in the <head> of the pages that draw figures,
    once per page, before their figures' scripts; pages without figures skip it."""
    if "plotly-graph-div" in context.get("body", ""):
        app.add_js_file("plotly.min.js", priority=100)


def setup(app):
    app.connect("html-page-context", _plotly_where_figures_are)
