"""A Sphinx math renderer that writes MathML at build time, with no JavaScript.

Sphinx's default renderer loads MathJax from a CDN, which a site read offline or from a
file server cannot reach. Browsers draw MathML Core themselves (Chromium since 109,
Firefox, Safari); docutils converts the LaTeX subset the course uses.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.utils.math import latex2mathml


def _inline(translator: Any, node: nodes.Element) -> None:
    translator.body.append(latex2mathml.tex2mathml(node.astext()))
    raise nodes.SkipNode


def _block(translator: Any, node: nodes.Element) -> None:
    translator.body.append(f'<div class="math-block">'
                           f'{latex2mathml.tex2mathml(node.astext(), as_block=True)}</div>')
    raise nodes.SkipNode


def setup(app: Any) -> dict[str, Any]:
    """Register the renderer as "mathml" (conf.py: html_math_renderer = "mathml")."""
    app.add_html_math_renderer("mathml", (_inline, None), (_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
