"""One notebook in headless Chromium, used as a learner uses it.

Open it in JupyterLab, Run > Run All Cells (or, on the nbval run's executed copy, run
only the cells its widgets need), wait for the kernel to go idle, then look:
errors, figures drawn, widgets drawn, one slider per dashboard moved (the figure must
change), animations played to their last frame, no JupyterLab notification shown. Every
wait is bounded, and every problem is collected as a sentence that says where (notebook,
cell, first line).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # playwright is imported only where the browser test runs
    from lab_driver import LabServer
    from playwright.sync_api import BrowserContext, Locator, Page

PROBE_JS = Path(__file__).with_name("notebook_probe.js")
KERNEL_READY_S = 60.0  # open the page, start the kernel
SETTLE_S = 30.0  # outputs arrived -> figures and widgets drawn
SLIDER_EFFECT_S = 30.0  # slider moved -> figure redrawn
ANIMATION_S = 60.0  # play clicked -> last frame shown
SLOW_FIRST_OUTPUT_S = 20.0  # a learner waits this long for the first output: say so
MAX_CELL_SHOTS = 10
TALL_VIEWPORT_PX = 2400  # window height while shooting single cells
# Browser console noise that says nothing about the notebook.
BENIGN_CONSOLE = ("ResizeObserver loop", "favicon", "Failed to load resource", "[Violation]")
# Console errors from the renderers a learner relies on are failures, not notes.
SERIOUS_CONSOLE = ("plotly", "Plotly", "widget", "Widget", "Error rendering", "renderModel")


@dataclass
class NotebookResult:
    """What the browser showed for one notebook."""

    name: str
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth reading, not a failure
    checks: list[str] = field(default_factory=list)  # what was verified, in words
    run_s: float | None = None  # Run All Cells -> kernel idle
    replayed: bool = False  # shown from the nbval run's executed copy, not run here
    live_cells: list[int] = field(default_factory=list)  # code cells run here on a replay
    first_output_s: float | None = None  # Run All Cells -> first output on the page
    n_code_cells: int = 0
    n_figures: int = 0
    n_widget_outputs: int = 0
    screenshots: list[Path] = field(default_factory=list)
    shot_kind: dict[Path, str] = field(default_factory=dict)  # window/dashboard/animation/...
    phase_s: dict[str, float] = field(default_factory=dict)  # seconds per phase of the test

    def summary(self) -> str:
        """One line for the terminal summary."""
        run = f"{self.run_s:.1f} s" if self.run_s is not None else "did not finish"
        if self.replayed:
            live = (f"; code cells {self.live_cells} run live in {run}" if self.live_cells
                    else "")
            run = f"nbval (outputs replayed{live})"
        first = f"{self.first_output_s:.1f} s" if self.first_output_s is not None else "-"
        verdict = "ok" if not self.failures else f"{len(self.failures)} problem(s)"
        phases = ", ".join(f"{k} {v:.0f} s" for k, v in self.phase_s.items())
        return (
            f"{self.name}: {verdict}; ran in {run} (first output after {first}); "
            f"{self.n_code_cells} code cells, {self.n_figures} figures, "
            f"{self.n_widget_outputs} widget outputs; {len(self.checks)} interactive checks"
            f" [{phases}]"
        )


@dataclass
class Replay:
    """Show the nbval run's executed copy of a notebook; run only some of its cells."""

    url: str  # the copy, as the lab serves it
    n_code_cells: int  # the page must show this many before anything is read
    live_cells: list[int]  # code cell numbers to run here (its widgets and what they need)


class NotebookSession:
    """A browser page showing one notebook, with the probe loaded."""

    def __init__(self, context: BrowserContext, server: LabServer, notebook: Path) -> None:
        self.notebook = notebook
        self.server = server
        self.page: Page = context.new_page()
        self.page.add_init_script(path=str(PROBE_JS))
        self.console: list[str] = []
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self.page.on(
            "console",
            lambda m: (
                self.console.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )

    def probe(self, fn: str, *args: Any) -> Any:
        """Call window.dpsimProbe.fn(*args) in the page."""
        return self.page.evaluate(
            "([fn, args]) => window.dpsimProbe ? window.dpsimProbe[fn](...args) : null",
            [fn, list(args)],
        )

    def cell(self, index: int) -> Locator:
        """The index-th cell of the notebook on screen."""
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell").nth(
            index
        )

    def where(self, cell: dict[str, Any]) -> str:
        """'00_x.ipynb cell 3 (`first line`)'."""
        return f"{self.notebook.name} cell {cell['index']} (`{cell['source_head']}`)"

    def close(self) -> None:
        self.page.close()


def _poll(check: Callable[[], Any], timeout_s: float, every_s: float = 0.25) -> Any:
    """Call check() until it returns something truthy or time is up; return its last value."""
    deadline = time.monotonic() + timeout_s
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every_s)
        value = check()
    return value


def open_notebook(nb: NotebookSession, url: str | None = None) -> str | None:
    """Load the page (the notebook's, or `url`) and wait for an idle kernel; return a
    failure sentence or None."""
    nb.page.goto(url or nb.server.notebook_url(nb.notebook), wait_until="domcontentloaded")

    def ready() -> str | None:
        dialog = nb.probe("dialogText")
        if dialog:
            return f"dialog: {dialog}"
        status = nb.probe("kernelStatus") or ""
        return "ready" if status.endswith("| Idle") else None

    state = _poll(ready, KERNEL_READY_S)
    if state == "ready":
        return None
    status = nb.probe("kernelStatus")
    if state:
        return f"{nb.notebook.name}: JupyterLab showed a {state} before the kernel was ready"
    return (
        f"{nb.notebook.name}: no idle kernel within {KERNEL_READY_S:.0f} s of opening "
        f"(kernel status: {status!r})"
    )


def run_all(nb: NotebookSession, result: NotebookResult, time_limit_s: float) -> bool:
    """Run > Run All Cells, then wait for the kernel to go idle with no cell queued."""
    nb.page.locator(".lm-MenuBar-itemLabel").filter(has_text=re.compile(r"^Run$")).click()
    nb.page.locator(".lm-Menu-itemLabel").filter(has_text=re.compile(r"^Run All Cells$")).click()
    t0 = time.monotonic()
    queued: set[int] = set()  # cells seen waiting or running ([*])
    cells: list[dict[str, Any]] = []
    while time.monotonic() - t0 < time_limit_s:
        cells = nb.probe("cells") or []
        prompts = [c["prompt"] for c in cells if c["code"]]
        queued |= {c["index"] for c in cells if c["prompt"] == "[*]:"}
        if result.first_output_s is None and any(
            c["index"] in queued and c["prompt"] != "[*]:" and c["outputs"] for c in cells
        ):
            result.first_output_s = time.monotonic() - t0
        dialog = nb.probe("dialogText")
        if dialog:
            result.failures.append(f"{nb.notebook.name}: a dialog opened while running: {dialog}")
            return False
        status = nb.probe("kernelStatus") or ""
        started = bool(queued) or time.monotonic() - t0 > 3.0
        if started and status.endswith("| Idle") and "[*]:" not in prompts:
            result.run_s = time.monotonic() - t0
            return True
        time.sleep(0.5)
    busy = [c for c in cells if c["code"] and c["prompt"] == "[*]:"]
    at = nb.where(busy[0]) if busy else nb.notebook.name
    result.failures.append(
        f"{at}: still running {time_limit_s:.0f} s after Run All Cells "
        f"(kernel status {nb.probe('kernelStatus')!r}); "
        "the notebook must finish well within this limit on a 2-core CPU"
    )
    return False


def run_cells(nb: NotebookSession, result: NotebookResult, code_cells: list[int],
              time_limit_s: float) -> bool:
    """Run code cells `code_cells` (numbers among the code cells) in order, each selected
    and run with Ctrl+Enter (notebook:run-cell) as a learner does, then wait for the kernel
    to go idle. The kernel is fresh: the j-th cell run must show execution count j."""
    code = [c for c in nb.probe("cells") or [] if c["code"]]
    missing = [k for k in code_cells if k >= len(code)]
    if missing:
        result.failures.append(f"{nb.notebook.name}: has no code cells {missing} to run live")
        return False
    t0 = time.monotonic()
    expected = {code[k]["index"]: f"[{j}]:" for j, k in enumerate(code_cells, start=1)}
    for index, prompt in expected.items():
        nb.cell(index).locator(".jp-InputArea-prompt").first.click()
        nb.page.keyboard.press("Control+Enter")
        if not _poll(partial(_started, nb, index, prompt), 10.0, 0.1):
            result.failures.append(
                f"{nb.where(_cell_info(nb, index))}: did not start after Ctrl+Enter "
                f"(prompt {_prompt(nb, index)!r})")
            return False
    while time.monotonic() - t0 < time_limit_s:
        dialog = nb.probe("dialogText")
        if dialog:
            result.failures.append(f"{nb.notebook.name}: a dialog opened while running: {dialog}")
            return False
        cells = {c["index"]: c for c in nb.probe("cells") or []}
        status = nb.probe("kernelStatus") or ""
        if status.endswith("| Idle") and all(
                cells[i]["prompt"] != "[*]:" for i in expected if i in cells):
            result.run_s = time.monotonic() - t0
            wrong = [f"{nb.where(cells[i])} shows {cells[i]['prompt']!r}, not {p!r}"
                     for i, p in expected.items() if cells[i]["prompt"] != p]
            result.failures += [f"{w} (live cells run out of order or twice)" for w in wrong]
            return not wrong
        time.sleep(0.5)
    busy = [i for i in expected if _prompt(nb, i) == "[*]:"]
    at = nb.where(_cell_info(nb, busy[0])) if busy else nb.notebook.name
    result.failures.append(
        f"{at}: still running {time_limit_s:.0f} s after the live cells {code_cells} were "
        f"started (kernel status {nb.probe('kernelStatus')!r})")
    return False


def _cell_info(nb: NotebookSession, index: int) -> dict[str, Any]:
    """The probe's record of cell `index` (for where())."""
    cells = nb.probe("cells") or []
    return cells[index] if index < len(cells) else {"index": index, "source_head": "?"}


def _started(nb: NotebookSession, index: int, done_prompt: str) -> bool:
    """Whether cell `index` is queued, running ([*]) or done with prompt `done_prompt`."""
    return _prompt(nb, index) in ("[*]:", done_prompt)


def _prompt(nb: NotebookSession, index: int) -> str:
    """The execution prompt of cell `index` ('[3]:', '[*]:', '[ ]:')."""
    return str(_cell_info(nb, index).get("prompt", ""))


def _settled(cells: list[dict[str, Any]]) -> bool:
    """Every figure drawn and no output in a transient 'loading' state."""
    for c in cells:
        if any(not p["plotted"] or p["n_drawn"] == 0 for p in c["plots"]):
            return False
        if any(o["problem"] and "Loading widget" in o["problem"] for o in c["outputs"]):
            return False
    return True


def inspect_outputs(
    nb: NotebookSession, result: NotebookResult, settle_s: float
) -> list[dict[str, Any]]:
    """Wait for figures and widgets to draw, then record every problem an output shows."""
    cells = _poll(
        lambda: (lambda cs: cs if cs and _settled(cs) else None)(nb.probe("cells")), settle_s
    )
    cells = cells or nb.probe("cells") or []
    for c in cells:
        if not c["code"]:
            continue
        result.n_code_cells += 1
        if c["prompt"] in ("[ ]:", "") and not c["empty_source"]:
            result.failures.append(f"{nb.where(c)}: never ran (Run All Cells stopped before it)")
        for o in c["outputs"]:
            if o["kind"] == "error":
                result.failures.append(f"{nb.where(c)}: shows an error:\n{o['text']}")
            elif o["problem"]:
                result.failures.append(f"{nb.where(c)}: {o['problem']}")
            elif o["kind"] == "stderr":
                result.notes.append(f"{nb.where(c)}: writes to stderr: {o['text'][:200]}")
            if o["kind"] == "widget" and not o["nested"]:
                result.n_widget_outputs += 1
        if c.get("scrolls_sideways"):
            result.failures.append(
                f"{nb.where(c)}: a figure or dashboard is wider than the notebook at "
                "1280 px with the file browser open (a learner scrolls sideways)"
            )
        for wrapped in c["wrapped_toggles"]:
            result.failures.append(
                f"{nb.where(c)}: {wrapped}; give it style={{'button_width': 'auto'}}"
            )
        for k, p in enumerate(c["plots"]):
            result.n_figures += 1
            what = f"{nb.where(c)}: figure {k} {p['title']!r}"
            if not p["plotted"]:
                result.failures.append(f"{what} was never drawn by plotly.js")
            elif p["n_drawn"] == 0:
                result.failures.append(f"{what} is drawn but shows no trace, shape or annotation")
            elif p["overlaps"]:
                result.failures.append(
                    f"{what}: text drawn on text: " + "; ".join(p["overlaps"][:4])
                )
            elif p["width_px"] < 50 or p["height_px"] < 50:
                result.failures.append(
                    f"{what} is {p['width_px']}x{p['height_px']} px: too small to see"
                )
        if c["plots"]:
            check_figures(nb, c, result)
    return cells


def check_figures(nb: NotebookSession, cell: dict[str, Any], result: NotebookResult,
                  when: str = "") -> None:
    """Every figure of the cell, as drawn, through tests.support.figure_checks (axes that hide the
    data, log axes over too many decades, empty traces or panels, cut-off table headers,
    titles that do not name their source)."""
    from tests.support.figure_checks import figure_problems

    for k, fig in enumerate(nb.probe("figureSpecs", cell["index"]) or []):
        title = re.sub(r"<[^>]+>", " ", str((fig["spec"]["layout"].get("title") or {}).get(
            "text", "")))[:80]
        for problem in figure_problems(fig["spec"], drawn_ranges=fig["ranges"]):
            result.failures.append(f"{nb.where(cell)}: figure {k} {title!r}{when}: {problem}")


def check_slider(nb: NotebookSession, cell: dict[str, Any], result: NotebookResult,
                 settings: int = 2) -> None:
    """Move the first enabled slider of a dashboard to `settings` new positions; what it
    shows must change each time, and every figure it draws must pass the figure checks."""
    for _ in range(settings):
        if not _move_slider(nb, cell, result):
            return
        check_figures(nb, cell, result, when=" after a slider move")


def check_dropdown(nb: NotebookSession, cell: dict[str, Any], result: NotebookResult,
                   settings: int = 2) -> None:
    """Choose `settings` other options of a dashboard's first dropdown; what it shows must
    change each time, and every figure it draws must pass the figure checks."""
    i = cell["index"]
    select = nb.cell(i).locator(".widget-dropdown select").first
    select.scroll_into_view_if_needed()
    if select.is_disabled():
        result.notes.append(f"{nb.where(cell)}: its dropdown is disabled; nothing chosen")
        return
    labels: list[str] = select.evaluate("s => Array.from(s.options).map(o => o.text)")
    now: int = select.evaluate("s => s.selectedIndex")
    for k in [k for k in range(len(labels)) if k != now][:settings]:
        before_fp = nb.probe("figureFingerprint", i)
        select.select_option(index=k)
        chose = f"dropdown option {labels[k][:60]!r}"
        if not _poll(partial(_changed, nb, i, before_fp), SLIDER_EFFECT_S):
            result.failures.append(f"{nb.where(cell)}: chose {chose}, but the figure did not "
                                   f"change within {SLIDER_EFFECT_S:.0f} s")
            return
        _wait_stable(nb, i)
        result.checks.append(f"{nb.where(cell)}: {chose} changed the figure")
        check_figures(nb, cell, result, when=" after a dropdown choice")


def _changed(nb: NotebookSession, index: int, before_fp: Any) -> bool:
    """Whether cell `index` shows a drawn figure other than fingerprint `before_fp`."""
    fp = nb.probe("figureFingerprint", index)
    return fp is not None and fp != before_fp


def _move_slider(nb: NotebookSession, cell: dict[str, Any], result: NotebookResult) -> bool:
    """Drag the first enabled slider one third along; True when the figure changed."""
    i = cell["index"]
    k = next(
        (
            k
            for k in range(cell["n_sliders"])
            if not (nb.probe("sliderState", i, k) or {}).get("disabled")
        ),
        None,
    )
    if k is None:
        result.notes.append(f"{nb.where(cell)}: every slider is disabled; none moved")
        return False
    before_fp = nb.probe("figureFingerprint", i)
    before = nb.probe("sliderState", i, k)
    handle = nb.cell(i).locator(".widget-slider .noUi-handle").nth(k)
    handle.scroll_into_view_if_needed()
    track = handle.locator("xpath=ancestor::div[contains(@class,'noUi-base')]").bounding_box()
    box = handle.bounding_box()
    step = 1 if before["now"] < before["max"] else -1
    if track and box:
        x0, y0 = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        x1 = min(
            max(x0 + step * max(track["width"] / 3, 12), track["x"]), track["x"] + track["width"]
        )
        nb.page.mouse.move(x0, y0)
        nb.page.mouse.down()
        nb.page.mouse.move(x1, y0, steps=8)
        nb.page.mouse.up()
    after = nb.probe("sliderState", i, k)
    if after["now"] == before["now"]:  # a drag that did not take: use the keyboard
        handle.focus()
        handle.press("ArrowRight" if step > 0 else "ArrowLeft")
        after = nb.probe("sliderState", i, k)
    label = before["label"] or f"slider {k}"
    moved = f"slider '{label}' {before['readout']} -> {after['readout']}"
    if after["now"] == before["now"]:
        result.failures.append(f"{nb.where(cell)}: could not move {moved} with mouse or keyboard")
        return False
    changed = _poll(
        lambda: (lambda fp: fp is not None and fp != before_fp)(nb.probe("figureFingerprint", i)),
        SLIDER_EFFECT_S,
    )
    if changed:
        _wait_stable(nb, i)  # a drag sends several values: let the last one draw
        result.checks.append(f"{nb.where(cell)}: {moved} changed the figure")
        return True
    result.failures.append(
        f"{nb.where(cell)}: moved {moved}, but the figure did not change "
        f"within {SLIDER_EFFECT_S:.0f} s"
    )
    return False


def _wait_stable(nb: NotebookSession, index: int, quiet_s: float = 1.5) -> None:
    """Wait (bounded) until the kernel is idle and a cell's fingerprint stops changing."""
    deadline = time.monotonic() + SLIDER_EFFECT_S
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        fp = nb.probe("figureFingerprint", index)
        idle = (nb.probe("kernelStatus") or "").endswith("| Idle")
        if fp != last or not idle:
            last, since = fp, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        time.sleep(0.25)


def check_plotly_animation(
    nb: NotebookSession, cell: dict[str, Any], p: int, result: NotebookResult
) -> None:
    """Click a plotly figure's play button; it must reach its last frame."""
    i = cell["index"]
    info = nb.probe("plotlyAnimation", i, p)
    if not info or info["n_frames"] < 2:
        return
    what = f"{nb.where(cell)}: animation in figure {p} ({info['n_frames']} frames)"
    if not info["play"]:
        result.notes.append(f"{what} has no play button")
        return
    gd = nb.cell(i).locator(".js-plotly-plot").nth(p)
    gd.scroll_into_view_if_needed()
    buttons = gd.locator(".updatemenu-button")
    label = info["play"]["label"]
    button = buttons.filter(has_text=label).first if label else buttons.first
    button.click()

    def at_end() -> bool:
        now = nb.probe("plotlyAnimation", i, p) or {}
        sliders_done = all(s["active"] == s["n_steps"] - 1 for s in now.get("sliders", []))
        return now.get("current_frame") == info["last_frame"] and sliders_done

    if _poll(at_end, ANIMATION_S):
        result.checks.append(f"{what}: '{label}' played to the last frame {info['last_frame']!r}")
        stale = (nb.probe("plotlyAnimation", i, p) or {}).get("stale_annotations") or []
        if stale:
            result.failures.append(
                f"{what}: at the last frame it still shows {len(stale)} annotation(s) of "
                f"earlier frames: {stale[:4]}. plotly merges frame annotations by index, so "
                "give every frame the same number of annotations (pad with "
                "{'visible': False})"
            )
    else:
        now = nb.probe("plotlyAnimation", i, p)
        result.failures.append(
            f"{what}: after clicking '{label}' it did not reach the last frame "
            f"{info['last_frame']!r} within {ANIMATION_S:.0f} s (now: frame "
            f"{now and now['current_frame']!r}, sliders {now and now['sliders']})"
        )


def check_play_widget(nb: NotebookSession, cell: dict[str, Any], result: NotebookResult) -> None:
    """Click an ipywidgets Play button; a slider of its cell must reach its last step."""
    i = cell["index"]
    before = [nb.probe("sliderState", i, k) for k in range(cell["n_sliders"])]
    before_fp = nb.probe("figureFingerprint", i)
    play = nb.cell(i).locator(".widget-play button:has(.fa-play)").first
    play.scroll_into_view_if_needed()
    play.click()

    def at_end() -> list[str]:
        done = []
        for k, b in enumerate(before):
            s = nb.probe("sliderState", i, k)
            if b and s and s["now"] != b["now"] and s["now"] == s["max"]:
                done.append(s["label"] or f"slider {k}")
        return done

    done = _poll(at_end, ANIMATION_S)
    what = f"{nb.where(cell)}: Play widget"
    if not done:
        result.failures.append(
            f"{what}: no slider reached its last step {ANIMATION_S:.0f} s after play"
        )
        return
    fp = nb.probe("figureFingerprint", i)
    if before_fp is not None and fp == before_fp:
        result.failures.append(f"{what}: played to the end but the figure did not change")
        return
    result.checks.append(f"{what}: played to the last step of {', '.join(done)}")


def screenshots(
    nb: NotebookSession, cells: list[dict[str, Any]], shots_dir: Path, result: NotebookResult
) -> None:
    """A window shot at the first dashboard or figure, then one shot per such cell."""
    stem = nb.notebook.stem
    nb.page.mouse.move(1, 1)  # no hover tooltip in the pictures
    # dashboards (widgets and figures) first, then the other figures and widgets
    visual = [c for c in cells if c["n_widgets"] and c["plots"]]
    visual += [c for c in cells if (c["plots"] or c["n_widgets"]) and c not in visual]
    if visual:
        nb.cell(visual[0]["index"]).scroll_into_view_if_needed(timeout=5000)
    path = shots_dir / f"{stem}.png"
    nb.page.screenshot(path=str(path))
    result.screenshots.append(path)
    result.shot_kind[path] = "window"
    # a tall window, so that a tall output fits on screen whole (JupyterLab scrolls inside)
    viewport = nb.page.viewport_size or {"width": 1280, "height": 860}
    nb.page.set_viewport_size({"width": viewport["width"], "height": TALL_VIEWPORT_PX})
    try:
        for c in visual[:MAX_CELL_SHOTS]:
            path = shots_dir / f"{stem}--cell{c['index']:02d}.png"
            area = nb.cell(c["index"]).locator(".jp-Cell-outputArea").first
            try:
                area.scroll_into_view_if_needed(timeout=5000)
                area.screenshot(path=str(path), timeout=15000)
                result.screenshots.append(path)
                result.shot_kind[path] = _kind(c)
            except Exception as exc:  # a screenshot is evidence, not a check
                result.notes.append(f"no screenshot of cell {c['index']}: {exc}")
    finally:
        nb.page.set_viewport_size(viewport)


def _kind(cell: dict[str, Any]) -> str:
    """What a cell's output is, for choosing screenshots: animation, dashboard, figure..."""
    if any(p["n_frames"] > 1 for p in cell["plots"]) or cell["n_play"]:
        return "animation"
    if cell["n_sliders"] and (cell["plots"] or cell["dashboard"]):
        return "dashboard"
    return "figure" if cell["plots"] else "widget"


def check_notebook(
    context: BrowserContext,
    server: LabServer,
    notebook: Path,
    shots_dir: Path,
    time_limit_s: float,
    replay: Replay | None = None,
) -> NotebookResult:
    """Everything above, for one notebook in a new page; the kernel is shut down afterwards.

    With `replay` (the nbval run's executed copy of the notebook, see
    tests/support/executed_notebooks.py) the page shows that copy and runs only its live
    cells; every output, figure, widget and animation on the page is checked as drawn.
    """
    result = NotebookResult(notebook.name, replayed=replay is not None,
                            live_cells=list(replay.live_cells) if replay else [])
    clock = _PhaseClock(result)
    nb = NotebookSession(context, server, notebook)
    cells: list[dict[str, Any]] = []
    try:
        failure = open_notebook(nb, replay.url if replay else None)
        if replay and not failure:
            failure = _wait_for_cells(nb, replay.n_code_cells)
        clock.lap("open")
        if failure:
            result.failures.append(failure)
        elif _run(nb, result, replay, time_limit_s):
            clock.lap("run")
            cells = inspect_outputs(nb, result, SETTLE_S)
            clock.lap("inspect")
            if result.first_output_s and result.first_output_s > SLOW_FIRST_OUTPUT_S:
                result.notes.append(
                    f"{notebook.name}: the first output appeared {result.first_output_s:.0f} s "
                    "after Run All Cells; a learner sees nothing happen for that long"
                )
            interact(nb, cells, result)
            clock.lap("interact")
        else:  # timed out: still report what the cells that did run show
            clock.lap("run")
            cells = inspect_outputs(nb, result, settle_s=3.0)
    finally:
        try:
            screenshots(nb, cells, shots_dir, result)
        except Exception as exc:  # a screenshot is evidence, not a check
            result.notes.append(f"no screenshot: {exc}")
        clock.lap("screenshots")
        check_notifications(nb, result)
        for line in nb.console:
            if not any(b in line for b in BENIGN_CONSOLE):
                serious = line.startswith("page error") or any(w in line for w in SERIOUS_CONSOLE)
                (result.failures if serious else result.notes).append(
                    f"{notebook.name}: browser {line[:400]}"
                )
        nb.close()
        server.shutdown_kernels(wait=False)
        clock.lap("close")
    return result


def check_notifications(nb: NotebookSession, result: NotebookResult) -> None:
    """Fail for every JupyterLab notification (toast) the page showed while it was open:
    `make lab` must show none (a toast covers the right edge of the dashboards)."""
    for toast in nb.probe("notifications") or []:
        still = "still on screen" if toast["visible_now"] else "closed since"
        result.failures.append(
            f"{nb.notebook.name}: JupyterLab showed a notification {toast['first_seen_s']:.0f} s "
            f"after the page opened ({still}): {toast['text']!r}; `python -m dpsim lab` must "
            "open JupyterLab without pop-ups (see LAB_APP_SETTINGS_DIR in dpsim/course/lab.py)"
        )


def _run(nb: NotebookSession, result: NotebookResult, replay: Replay | None,
         time_limit_s: float) -> bool:
    """Run All Cells; on a replay, only the live cells (none: nothing to run)."""
    if replay is None:
        return run_all(nb, result, time_limit_s)
    return run_cells(nb, result, replay.live_cells, time_limit_s) if replay.live_cells else True


def _wait_for_cells(nb: NotebookSession, n_code_cells: int) -> str | None:
    """Wait until the page shows `n_code_cells` code cells (JupyterLab adds a long
    notebook's cells in batches after it opens); return a failure sentence or None."""
    def shown() -> int:
        return sum(1 for c in nb.probe("cells") or [] if c["code"])

    if _poll(lambda: shown() >= n_code_cells, SETTLE_S):
        return None
    return (f"{nb.notebook.name}: the page shows {shown()} of its {n_code_cells} code cells "
            f"{SETTLE_S:.0f} s after it opened")


def interact(nb: NotebookSession, cells: list[dict[str, Any]], result: NotebookResult) -> None:
    """Play every animation; move one slider in every dashboard (sliders and a figure), or
    choose other options of its dropdown where it has no slider."""
    for c in cells:
        checks: list[Callable[[], None]] = [
            partial(check_plotly_animation, nb, c, p, result)
            for p, info in enumerate(c["plots"])
            if info["n_frames"] > 1
        ]
        if c["n_play"]:
            checks.append(partial(check_play_widget, nb, c, result))
        elif c["n_sliders"] and (c["plots"] or c["dashboard"]):
            checks.append(partial(check_slider, nb, c, result))
        elif c["n_dropdowns"] and c["dashboard"]:
            checks.append(partial(check_dropdown, nb, c, result))
        for check in checks:
            try:
                check()
            except Exception as exc:  # e.g. a button that never became clickable
                result.failures.append(
                    f"{nb.where(c)}: could not use it: {type(exc).__name__}: {exc}"[:800]
                )


class _PhaseClock:
    """Seconds spent in each phase, kept in result.phase_s."""

    def __init__(self, result: NotebookResult) -> None:
        self.result = result
        self.t = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.result.phase_s[name] = now - self.t
        self.t = now
