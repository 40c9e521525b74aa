"""Every notebook, opened in JupyterLab in headless Chromium and used as a learner would.

Run > Run All Cells; then: no cell shows an error, every plotly figure is drawn, the
ipywidgets render, one slider per dashboard changes its figure, animations play to
their last frame, JupyterLab shows no notification (its news question covered the
dashboards' right edge). Screenshots go to artifacts/screenshots/ (the summary says where).

A notebook that nbval runs in the same pytest session is not run a second time: the page
shows the executed copy the nbval run wrote (tests/support/executed_notebooks.py) and runs
live only the cells its ipywidgets need (the widget cells and the cells that bind the
names they use, tests/support/cell_dependencies.py); the same checks read the page.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from lab_driver import LabServer, copy_for_docs, notebooks

from tests.support.executed_notebooks import cells_to_run, executed_path, replayed

# Run All of one notebook must end within this. Chapter 10 (4-rank process groups) ran in
# 56 s alone and in 172 s beside the other pytest-xdist worker on 2 cores: 300 s keeps a
# loaded CI machine from failing a notebook that works, and still ends a hang.
NOTEBOOK_LIMIT_S = float(os.environ.get("DPSIM_BROWSER_NOTEBOOK_LIMIT_S", "300"))
# The README's "what you will see" pictures: notebook -> (kind of shot, file in docs/screenshots).
# Refreshed only on request: DPSIM_DOCS_SCREENSHOTS=1 pytest tests/browser
DOCS_SHOTS = {
    "01_single_device": ("window", "jupyterlab_memory_explorer.png"),
    "02_collectives": ("animation", "ring_allreduce.png"),
    "07_choosing_a_strategy": ("dashboard", "strategy_dashboard.png"),
}
DOCS_SHOT_MAX_BYTES = 150_000
# How long the browser test waits for the nbval run (on the other pytest-xdist worker,
# started first) to write a replayed notebook's executed copy; a copy that does not come
# fails the test (it has to fit in the test's timeout, NOTEBOOK_LIMIT_S + 150).
REPLAY_WAIT_S = float(os.environ.get("DPSIM_BROWSER_REPLAY_WAIT_S", "300"))
_NOTEBOOKS: list[Any] = notebooks() or [
    pytest.param(
        None,
        marks=pytest.mark.skip(reason="browser test did not run: notebooks/ holds no notebook"),
    )
]


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_LIMIT_S + 150)  # run limit + opening, checks, screenshots
@pytest.mark.parametrize("notebook", _NOTEBOOKS, ids=lambda p: p.stem if p else "none")
def test_notebook_in_jupyterlab(
    notebook: Path,
    lab_server: LabServer,
    browser_context: Any,
    shots_dir: Path,
    record_result: Any,
    request: pytest.FixtureRequest,
) -> None:
    from notebook_page import Replay, check_notebook

    executed = _executed_copy(notebook, lab_server, request.session)
    replay = None
    if executed is not None:
        url = lab_server.file_url(executed)
        assert url is not None  # _executed_copy checked that the lab serves artifacts/
        n_code = sum(c.cell_type == "code" for c in nbformat.read(executed, as_version=4).cells)
        replay = Replay(url, n_code, cells_to_run(executed))
    result = check_notebook(browser_context, lab_server, notebook, shots_dir, NOTEBOOK_LIMIT_S,
                            replay)
    record_result(result)
    for note in result.notes:
        print("note:", note)
    for check in result.checks:
        print("checked:", check)
    if os.environ.get("DPSIM_DOCS_SCREENSHOTS") == "1" and notebook.stem in DOCS_SHOTS:
        _refresh_docs_screenshot(notebook.stem, result.shot_kind)
    assert not result.failures, (
        f"{notebook.name} in JupyterLab ({result.summary()}):\n- "
        + "\n- ".join(result.failures)
        + f"\nscreenshots: {', '.join(str(p) for p in result.screenshots[:3])}"
    )


def _refresh_docs_screenshot(stem: str, shot_kind: dict[Path, str]) -> None:
    """Copy this notebook's first shot of the wanted kind to docs/screenshots/."""
    kind, name = DOCS_SHOTS[stem]
    shot = next((p for p, k in shot_kind.items() if k == kind), None)
    assert shot is not None, f"{stem}: no {kind} screenshot for docs/screenshots/{name}"
    nbytes = shot.stat().st_size
    assert nbytes <= DOCS_SHOT_MAX_BYTES, f"{shot} is {nbytes} bytes, over the README's budget"
    print("docs screenshot:", copy_for_docs(shot, name))


def _executed_copy(notebook: Path, server: LabServer, session: pytest.Session) -> Path | None:
    """The nbval run's executed copy of a replayed notebook, or None to run it all here.

    None where the notebook is not replayed, nbval does not run it in this session, or
    the server cannot serve artifacts/. The copy is waited for (nbval runs it first, on
    the other worker); one that does not come fails the test.
    """
    if not replayed(notebook) or server.file_url(notebook) is None:
        return None
    if not any(getattr(i, "cell_num", None) is not None and Path(str(i.path)) == notebook
               for i in session.items):
        return None
    path = executed_path(notebook)
    deadline = time.monotonic() + REPLAY_WAIT_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(1.0)
    assert path.exists(), (
        f"{notebook.name}: nbval runs it in this session, but its executed copy {path} did "
        f"not appear within {REPLAY_WAIT_S:.0f} s (see the nbval cells of {notebook.name})"
    )
    return path
