"""The plotly renderer fits the front end (JupyterLab, VS Code, Colab) and embeds no plotly.js."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.offline import get_plotlyjs

from dpsim.course.session import (
    COLAB,
    LAB_EXTENSION,
    MIME,
    MIME_WITH_HTML,
    choose_renderer,
    lab_extension_installed,
    setup,
)


@pytest.mark.parametrize(("env", "modules", "lab", "expected"), [
    ({}, (), True, MIME),  # JupyterLab with its plotly extension: as before
    ({}, (), False, MIME_WITH_HTML),  # JupyterLab without it: the HTML fallback
    ({"VSCODE_PID": "42"}, (), True, MIME_WITH_HTML),
    ({}, ("google.colab",), True, COLAB),
    ({"COLAB_RELEASE_TAG": "release-colab"}, (), False, COLAB),
    ({"PLOTLY_RENDERER": "notebook_connected"}, ("google.colab",), True,
     "notebook_connected"),
])
def test_renderer_for_each_front_end(env: dict[str, str], modules: tuple[str, ...], lab: bool,
                                     expected: str) -> None:
    assert choose_renderer(env, modules, lab) == expected


def test_lab_extension_is_found_where_jupyter_looks(tmp_path: Path) -> None:
    assert not lab_extension_installed([str(tmp_path)])
    (tmp_path / LAB_EXTENSION).mkdir()
    (tmp_path / LAB_EXTENSION / "package.json").write_text("{}")
    assert lab_extension_installed([str(tmp_path / "missing"), str(tmp_path)])


@pytest.mark.parametrize("renderer", [MIME, MIME_WITH_HTML, COLAB])
def test_no_renderer_embeds_plotly_js(renderer: str) -> None:
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2])).to_dict()
    library = get_plotlyjs()
    outputs: dict[str, str] = {}
    for part in renderer.split("+"):
        outputs.update({k: str(v) for k, v in pio.renderers[part].to_mimebundle(fig).items()})
    assert sum(len(v) for v in outputs.values()) < len(library) / 50
    assert all(library[:2000] not in v for v in outputs.values())
    if "text/html" in outputs:  # the fallback loads plotly.js from the CDN
        assert "cdn.plot.ly" in outputs["text/html"]
    assert ("application/vnd.plotly.v1+json" in outputs) == (renderer != COLAB)


def test_setup_sets_the_chosen_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    before = pio.renderers.default
    try:
        monkeypatch.setenv("PLOTLY_RENDERER", MIME_WITH_HTML)
        assert setup(seed=1).renderer == MIME_WITH_HTML
        assert pio.renderers.default == MIME_WITH_HTML
        assert setup(seed=1, renderer=MIME).renderer == MIME
    finally:
        pio.renderers.default = before
