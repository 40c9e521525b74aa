// Read what a learner sees in a JupyterLab notebook page (DOM only, no private app API).
// Injected into every page by lab_driver.py; everything hangs off window.dpsimProbe.
(() => {
  const WIDGET_REPR = /^(VBox|HBox|Box|GridBox|Tab|Accordion|IntSlider|FloatSlider|FloatLogSlider|SelectionSlider|IntRangeSlider|Dropdown|ToggleButtons|RadioButtons|Checkbox|Button|Output|Play|Label|HTML|interactive|FigureWidget)\(/;
  const ERROR_TEXT = /^Javascript Error:|Traceback \(most recent call last\)|^-{20,}\s*\n\s*\w+(Error|Exception|Interrupt|Exit)\b/m;

  const DRAWN = [".main-svg .trace", ".main-svg .table", ".main-svg .hm", ".main-svg image",
    ".main-svg .sankey", ".main-svg .parcoords", ".shapelayer path", ".annotation"].join(", ");

  function head(text, n) {
    const t = (text || "").trim();
    return t.length > n ? t.slice(0, n) + "..." : t;
  }

  function kernelStatus() {
    const el = document.querySelector('.jp-StatusBar-TextItem[title^="Change kernel"]');
    return el ? el.textContent.trim() : null;
  }

  function dialogText() {
    const d = document.querySelector(".jp-Dialog");
    return d ? head(d.textContent, 300) : null;
  }

  // JupyterLab's notifications (its news question, "a newer version is available", ...)
  // show as react-toastify toasts (.Toastify__toast, JupyterLab 4.6: class
  // jp-Notification-Toast-<type> on the toast's body). Every toast the page ever showed is
  // kept, so one that closed itself before the test looked still counts.
  const TOAST = '.Toastify__toast, [class*="jp-Notification-Toast-"]:not([class*="jp-Notification-Toast-Close"])';
  const toastsSeen = new Map(); // text -> {text, first_seen_s}
  const t0 = performance.now();

  function visible(el) {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== "hidden";
  }

  function toastNodes() {
    const found = Array.from(document.querySelectorAll(TOAST)).filter(visible);
    return found.filter((el) => !found.some((other) => other !== el && other.contains(el)));
  }

  function toastText(el) {
    return head((el.textContent || "").replace(/\s+/g, " "), 200) || "(a toast with no text)";
  }

  function recordToasts() {
    for (const el of toastNodes()) {
      const text = toastText(el);
      if (!toastsSeen.has(text)) toastsSeen.set(text, { text, first_seen_s: (performance.now() - t0) / 1000 });
    }
  }
  setInterval(recordToasts, 250);

  function notifications() {
    recordToasts();
    const now = new Set(toastNodes().map(toastText));
    return Array.from(toastsSeen.values()).map((t) => ({ ...t, visible_now: now.has(t.text) }));
  }

  function cellNodes() {
    const nb = document.querySelector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook");
    return nb ? Array.from(nb.querySelectorAll(".jp-Cell")).filter((c) => c.closest(".jp-Notebook") === nb) : [];
  }

  // Text drawn on text: parts of a plotly figure whose boxes overlap (legend on the axis
  // title or the slider, an annotation over the title...). Returns sentences.
  const PARTS = {
    title: (gd) => gd.querySelectorAll(".infolayer .gtitle"),
    "axis title": (gd) =>
      Array.from(gd.querySelectorAll(".infolayer text")).filter((t) => /^[xy]\d*title$/.test(t.getAttribute("class") || "")),
    "legend item": (gd) => gd.querySelectorAll(".legend .traces"),
    slider: (gd) => gd.querySelectorAll(".slider-container"),
    button: (gd) => gd.querySelectorAll(".updatemenu-button"),
    annotation: (gd) => gd.querySelectorAll(".annotation-text-g"),
  };
  const CLASHES = [
    ["legend item", "axis title"], ["legend item", "slider"], ["legend item", "button"],
    ["legend item", "title"], ["legend item", "annotation"], ["title", "annotation"],
    ["title", "button"], ["axis title", "slider"], ["axis title", "button"],
  ];
  const MIN_OVERLAP_PX2 = 30;

  function label(el) {
    return head((el.textContent || "").replace(/\s+/g, " "), 40);
  }

  function overlaps(gd) {
    const boxes = {};
    for (const [name, find] of Object.entries(PARTS)) {
      boxes[name] = Array.from(find(gd))
        .map((el) => ({ el, r: el.getBoundingClientRect() }))
        .filter((b) => b.r.width > 0 && b.r.height > 0 && getComputedStyle(b.el).visibility !== "hidden");
    }
    const found = [];
    for (const [a, b] of CLASHES) {
      for (const x of boxes[a]) {
        for (const y of boxes[b]) {
          const w = Math.min(x.r.right, y.r.right) - Math.max(x.r.left, y.r.left);
          const h = Math.min(x.r.bottom, y.r.bottom) - Math.max(x.r.top, y.r.top);
          if (w > 0 && h > 0 && w * h >= MIN_OVERLAP_PX2) {
            found.push(`${a} '${label(x.el)}' overlaps ${b} '${label(y.el)}'`);
          }
        }
      }
    }
    return found;
  }

  function plotInfo(gd) {
    const box = gd.getBoundingClientRect();
    const frames = gd._transitionData && gd._transitionData._frames ? gd._transitionData._frames : [];
    const layout = gd.layout || {};
    return {
      n_traces: Array.isArray(gd.data) ? gd.data.length : 0,
      // drawn marks: trace groups (scatter, bar, pie...), tables, heatmap images, shapes, annotations
      n_drawn: gd.querySelectorAll(DRAWN).length,
      plotted: !!gd._fullLayout,
      width_px: Math.round(box.width),
      height_px: Math.round(box.height),
      title: head(((layout.title || {}).text) || "", 80),
      n_frames: frames.length,
      n_updatemenus: (layout.updatemenus || []).length,
      n_sliders: (layout.sliders || []).length,
      overlaps: gd._fullLayout ? overlaps(gd) : [],
    };
  }

  function outputInfo(el) {
    const mime = el.getAttribute("data-mime-type");
    const text = el.textContent || "";
    let kind = "other";
    if (el.querySelector(".jupyter-widgets")) kind = "widget";
    else if (el.classList.contains("js-plotly-plot") || el.querySelector(".js-plotly-plot")) kind = "plot";
    else if (mime === "application/vnd.jupyter.stderr") kind = ERROR_TEXT.test(text) ? "error" : "stderr";
    else if (mime === "application/vnd.jupyter.stdout") kind = "stdout";
    else if (mime === "text/plain") kind = "text";
    else if (mime) kind = mime;
    const problem =
      /Error displaying widget|Loading widget\.\.\.|model not found|Failed to load model class/.test(text) ? "widget did not render: " + head(text, 160)
      : /No renderer could be found for output/.test(text) ? "JupyterLab has no renderer for this output (a missing extension?): " + head(text, 160)
      : kind === "text" && /^Figure\(\{/.test(text.trim()) ? "plotly figure shown as text (no plotly renderer in JupyterLab)"
      : kind === "text" && WIDGET_REPR.test(text.trim()) ? "widget shown as text (widget manager missing): " + head(text, 100)
      : el.classList.contains("jp-RenderedPlotly") && !el._fullLayout ? "a plotly figure that plotly.js never drew"
      : null;
    return {
      kind,
      mime,
      text: kind === "plot" ? "" : head(text, kind === "error" ? 1200 : 300),
      nested: !!(el.parentElement && el.parentElement.closest(".jupyter-widgets")),
      problem,
    };
  }

  // ToggleButtons squeezed into a narrow column stack their buttons like a menu.
  function wrappedToggles(cell) {
    return Array.from(cell.querySelectorAll(".widget-toggle-buttons")).flatMap((w) => {
      const tops = new Set(
        Array.from(w.querySelectorAll("button")).map((b) => Math.round(b.getBoundingClientRect().top)),
      );
      const name = (w.querySelector(".widget-label") || {}).textContent || "";
      return tops.size > 1 ? [`ToggleButtons '${name.trim()}' stacks its buttons on ${tops.size} rows`] : [];
    });
  }

  function cells() {
    return cellNodes().map((c, index) => {
      const code = c.classList.contains("jp-CodeCell");
      const prompt = code ? (c.querySelector(".jp-InputArea-prompt") || {}).textContent || "" : "";
      const firstLine = c.querySelector(".jp-InputArea-editor .cm-line");
      const outputs = code ? Array.from(c.querySelectorAll(".jp-OutputArea-output")).map(outputInfo) : [];
      return {
        index,
        code,
        prompt: prompt.trim(),
        source_head: head(firstLine ? firstLine.textContent : "", 80),
        empty_source: code && !(c.querySelector(".jp-InputArea-editor .cm-content") || {}).textContent,
        outputs,
        plots: Array.from(c.querySelectorAll(".js-plotly-plot")).map(plotInfo),
        n_widgets: c.querySelectorAll(".jupyter-widgets").length,
        n_sliders: c.querySelectorAll(".widget-slider .noUi-handle").length,
        n_play: c.querySelectorAll(".widget-play").length,
        n_dropdowns: c.querySelectorAll(".widget-dropdown select").length,
        dashboard: !!c.querySelector(".dpsim-dashboard"),
        // outputs wider than the notebook: a learner would have to scroll sideways
        scrolls_sideways: Array.from(c.querySelectorAll(".jp-OutputArea-output")).some(
          (o) => o.scrollWidth > o.clientWidth + 4 && !!o.querySelector(".jupyter-widgets, .js-plotly-plot")),
        wrapped_toggles: wrappedToggles(c),
      };
    });
  }

  function hashString(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    return (h >>> 0).toString(16) + ":" + s.length;
  }

  function replacer(_key, value) {
    // typed arrays (plotly decodes base64 arrays into them) -> plain arrays
    return ArrayBuffer.isView(value) ? Array.from(value) : value;
  }

  // A fingerprint of what a cell shows: every figure's data, shapes, annotations and title,
  // and the text printed inside its widgets. null while a figure is not drawn yet
  // (an Output widget redrawing) or when there is nothing to compare.
  function figureFingerprint(index) {
    const c = cellNodes()[index];
    if (!c) return null;
    const gds = Array.from(c.querySelectorAll(".js-plotly-plot"));
    if (gds.some((gd) => !gd._fullLayout)) return null;
    const figures = gds.map((gd) => {
      const l = gd.layout || {};
      return [gd.data, l.shapes, l.annotations, l.title];
    });
    const texts = Array.from(c.querySelectorAll(".widget-output .jp-RenderedText")).map((e) => e.textContent);
    if (!figures.length && !texts.length) return null;
    return hashString(JSON.stringify([figures, texts], replacer));
  }

  function sliderState(index, k) {
    const c = cellNodes()[index];
    const handles = c ? c.querySelectorAll(".widget-slider .noUi-handle") : [];
    const h = handles[k];
    if (!h) return null;
    const slider = h.closest(".widget-slider");
    const label = slider.querySelector(".widget-label");
    const readout = slider.querySelector(".widget-readout");
    return {
      label: label ? label.textContent.trim() : "",
      readout: readout ? readout.textContent.trim() : "",
      now: parseFloat(h.getAttribute("aria-valuenow")),
      min: parseFloat(h.getAttribute("aria-valuemin")),
      max: parseFloat(h.getAttribute("aria-valuemax")),
      disabled: slider.classList.contains("mod-disabled") || h.hasAttribute("disabled"),
    };
  }

  // Plotly animations: the index of the "play" button (method animate, all frames), and
  // how far the animation got (current frame name, slider position).
  function layoutOf(gd) {
    return gd.layout || {};
  }

  function plotlyAnimation(index, p) {
    const c = cellNodes()[index];
    const gd = c ? c.querySelectorAll(".js-plotly-plot")[p] : null;
    if (!gd || !gd._transitionData) return null;
    const frames = gd._transitionData._frames || [];
    const menus = (gd.layout || {}).updatemenus || [];
    let play = null;
    menus.forEach((m, mi) => {
      (m.buttons || []).forEach((b, bi) => {
        const args = b.args || [];
        const allFrames = args[0] === null || args[0] === undefined || (Array.isArray(args[0]) && args[0].length > 1);
        if (play === null && b.method === "animate" && allFrames) play = { menu: mi, button: bi, label: b.label || "" };
      });
    });
    const sliders = ((gd._fullLayout || {}).sliders || []).map((s) => ({ active: s.active, n_steps: (s.steps || []).length }));
    // plotly merges a frame's layout.annotations into the figure's by index: a frame with
    // fewer annotations than the one before leaves the extra ones on screen.
    const last = frames.length ? frames[frames.length - 1] : null;
    const wanted = last && last.layout && last.layout.annotations;
    let stale = [];
    if (wanted) {
      const texts = (list) => list.filter((a) => a.visible !== false).map((a) => a.text || "");
      const left = texts(wanted);
      for (const t of texts(layoutOf(gd).annotations || [])) {
        const at = left.indexOf(t);
        if (at >= 0) left.splice(at, 1);
        else stale.push(head(t.replace(/<[^>]+>/g, ""), 60) || "(an arrow)");
      }
    }
    return {
      n_frames: frames.length,
      last_frame: last ? last.name : null,
      stale_annotations: stale,
      current_frame: gd._fullLayout ? gd._fullLayout._currentFrame : null,
      play,
      sliders,
    };
  }

  // Every figure of a cell as plotly.js drew it: its data and layout, and the range each
  // axis really shows (in the axis's own units: log10 on a log axis), for the figure
  // checks of tests.support.figure_checks. Frames are left out (they can be large).
  function figureSpecs(index) {
    const c = cellNodes()[index];
    if (!c) return [];
    return Array.from(c.querySelectorAll(".js-plotly-plot")).filter((gd) => gd._fullLayout).map((gd) => {
      const ranges = {};
      for (const key of Object.keys(gd._fullLayout)) {
        const ax = gd._fullLayout[key];
        if (/^[xy]axis\d*$/.test(key) && ax && Array.isArray(ax.range) && ax.type !== "category" && ax.type !== "date") {
          ranges[key] = ax.range.map(Number);
        }
      }
      // frames shrunk to which traces they fill: a trace empty in the first frame of an
      // animation (nothing sent yet) is filled by a later one
      const frames = ((gd._transitionData && gd._transitionData._frames) || []).map((f) => ({
        traces: f.traces,
        data: (f.data || []).map((d) => ({ x: Array.from(d.x || []).filter((v) => v !== null).slice(0, 2) })),
      }));
      const spec = JSON.parse(JSON.stringify({ data: gd.data, layout: gd.layout, frames }, replacer));
      spec.layout.width = Math.round(gd.getBoundingClientRect().width);
      return { spec, ranges };
    });
  }

  window.dpsimProbe = { kernelStatus, dialogText, notifications, cells, figureFingerprint, sliderState, plotlyAnimation, figureSpecs };
})();
