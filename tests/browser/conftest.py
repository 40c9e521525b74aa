"""Fixtures for the browser test: one JupyterLab server and one Chromium for all notebooks.

Without Chromium or playwright the tests are skipped, and the run ends with one line
saying so (set DPSIM_REQUIRE_BROWSER=1, as CI does, to make that a failure instead).
What the summary prints travels in the test reports (`user_properties`), so it is printed
under pytest-xdist too, where the tests run in a worker and the summary in the main process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_driver import (
    INSTALL_HINT,
    LabServer,
    clean_screenshot_dir,
    notebooks,
    start_lab,
    unavailable_reason,
)

SKIP_PREFIX = "browser test did not run"
_PROBLEMS_KEY = pytest.StashKey[list[str]]()
_RESULT_PROPERTY = "dpsim_browser_result"  # a call report's: summary, notes, screenshot dirs
_PROBLEMS_PROPERTY = "dpsim_browser_problems"  # a teardown report's: what stopping the lab found


def _skip_or_fail(why: str) -> None:
    message = f"{SKIP_PREFIX}: {why}; {INSTALL_HINT}"
    if os.environ.get("DPSIM_REQUIRE_BROWSER") == "1":
        pytest.fail(message + " (DPSIM_REQUIRE_BROWSER=1 makes this a failure)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser_ready() -> None:
    """Skip (or fail under DPSIM_REQUIRE_BROWSER=1) where Chromium or playwright is missing."""
    why = unavailable_reason()
    if why:
        _skip_or_fail(why)


@pytest.fixture(scope="module")
def lab_server(
    browser_ready: None, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LabServer]:
    """`python -m dpsim lab` in the background; stopped, with all its kernels, at the end."""
    server = start_lab(tmp_path_factory.mktemp("lab"), notebooks())
    try:
        yield server
    finally:
        problems = server.stop()
        request.config.stash.setdefault(_PROBLEMS_KEY, []).extend(problems)
    saved = [p for p in problems if "wrote a notebook" in p]
    if saved:  # outputs written into notebooks/ would end up in the repository
        pytest.fail("\n".join(saved), pytrace=False)


@pytest.fixture(scope="module")
def browser_context(browser_ready: None) -> Iterator[Any]:
    """Headless Debian Chromium driven by playwright (no browser download), one context.

    One context for all notebooks: JupyterLab's static files load once, then from cache.
    """
    from lab_driver import CHROMIUM_FLAGS, CHROMIUM_PATH, VIEWPORT
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=str(CHROMIUM_PATH), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield chromium.new_context(viewport=VIEWPORT, device_scale_factor=1)
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def shots_dir(browser_ready: None) -> Path:
    """artifacts/screenshots/, emptied of the last run's PNGs."""
    return clean_screenshot_dir()


@pytest.fixture
def record_result(request: pytest.FixtureRequest) -> Any:
    """Keep a NotebookResult for the terminal summary (in the test's report)."""

    def record(result: Any) -> None:
        request.node.user_properties.append((_RESULT_PROPERTY, {
            "summary": result.summary(),
            "notes": [note.splitlines()[0][:200] for note in result.notes],
            "shots": sorted({str(p.parent) for p in result.screenshots}),
        }))

    return record


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Problems found when the lab stopped go into the report of the teardown they ended."""
    try:
        return (yield)
    finally:
        problems = item.config.stash.get(_PROBLEMS_KEY, [])
        if problems:
            item.user_properties.append((_PROBLEMS_PROPERTY, list(problems)))
            problems.clear()


def _reported(terminalreporter: Any, name: str, when: str) -> list[Any]:
    """The values of user property `name` in the `when` reports, in the order they came."""
    return [value for reports in terminalreporter.stats.values() for r in reports
            if getattr(r, "when", None) == when
            for key, value in getattr(r, "user_properties", ()) if key == name]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Per-notebook lines, where the screenshots are, or the one line saying it did not run."""
    results = _reported(terminalreporter, _RESULT_PROPERTY, "call")
    problems = [p for ps in _reported(terminalreporter, _PROBLEMS_PROPERTY, "teardown") for p in ps]
    skipped = [
        r for r in terminalreporter.stats.get("skipped", []) if SKIP_PREFIX in str(r.longrepr)
    ]
    if results:
        terminalreporter.section("JupyterLab in headless Chromium")
        for r in sorted(results, key=lambda r: r["summary"]):
            terminalreporter.write_line(r["summary"])
            for note in r["notes"]:
                terminalreporter.write_line(f"    note: {note}")
        for line in problems:
            terminalreporter.write_line(f"after the test: {line}")
        for folder in sorted({f for r in results for f in r["shots"]}):
            terminalreporter.write_line(f"browser screenshots: {folder}")
    elif skipped:
        reason = str(skipped[0].longrepr[-1]) if isinstance(skipped[0].longrepr, tuple) else ""
        reason = reason.removeprefix("Skipped: ")
        terminalreporter.write_line(
            reason or f"{SKIP_PREFIX}; {INSTALL_HINT}", yellow=True, bold=True
        )
