"""Every control of every notebook's explorer, operated in JupyterLab in a real (headless) Chromium.

JupyterLab starts on a free local port over copies of the notebooks with their small test
parameters injected (papermill's ``prepare_only``), as the set-up leaves it
(no save hook: a notebook is saved with its outputs; git's clean filter strips them). For each
notebook that shows a widget the test opens it and runs the cells the widget needs (its parameters,
their check and the widget's own cell; papermill runs every cell of every notebook elsewhere in the
suite, ``test_notebooks``), then works every control as a person would:

* every option of every dropdown (rule, mode, width generation, drafter, gather, batch, scenario,
  engine version), one after the other;
* every stop of every slider (page size, context presets, draft tokens, overshoot, spare pages,
  conservativeness, acceptance), from its first to its last, with the keyboard;
* a typed value in each text box (context length, batch rows, run seed) and an edited command.

After each action the explorer must have redrawn (each redraw is numbered in the outcome line and
in the figure, so a redraw that changes nothing visible still counts), the figure in the explorer's
own output must show what the line says (a figure handed to ``Output.append_display_data`` lands in
JupyterLab's log console instead and fails here), a chosen option must be named in what it shows,
and no traceback may appear anywhere: not in a cell, not in the explorer's line (an explorer shows
its own error as ``error: ...``), not in any message the kernel sends (JupyterLab's log console).
Finally the notebook is saved: the file on disk must hold its outputs, and the clean filter
(``scripts/nbstrip.py``) must turn it back into the committed notebook byte for byte (JupyterLab's
page holds numbers as JavaScript does, so this is where a metadata ``0.0`` saved as ``0`` would show).

Every redraw is timed in the page, from the input event to the redrawn figure; the module prints
their count, median and slowest per notebook against the 500 ms target (issue 15), and fails only
past ``REDRAW_LIMIT_S`` (CI's two cores run JupyterLab, the kernel, Chromium and pytest at once).
The preflight box answers within that limit too, with its check or with a line that says what it
is doing for which release (``data-state="pending"``: a release's first check starts its engine
process); the test then waits up to ``CHECK_S`` for the check itself and checks that. The kernels
run with ``WORKBENCH_NO_FETCH=1``: a release not in the engine cache answers at once that it is
missing and how to fetch it, so walking the dropdown's every release downloads nothing.

Needs Debian's chromium (never a downloaded browser) and playwright; without them it skips and says
how to enable them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import CHROMIUM_ARGS, chromium_or_skip
from nbstrip_filter import load as load_nbstrip

from workbench.present.report import NOTEBOOKS_DIR, notebook_paths, notebook_test_parameters

REDRAW_TARGET_S = 0.5  # issue 15's target: printed against the measured redraws
REDRAW_LIMIT_S = 5.0  # asserted: slower than this is broken, however busy the machine
CELL_S = 120  # one cell of a notebook's set-up (imports, the widget's first draw)
CHECK_S = 180  # the preflight box's check, once announced: a release's engine process starting
# The cell that shows a notebook's widget: one of these calls at the start of a line.
WIDGET_CALL = re.compile(r"^(explorer|run_explorer|preflight_box)\(", re.MULTILINE)
TOKEN = "workbench-explorer-test"
ROOT = Path(__file__).resolve().parents[1]
REDRAWS: dict[str, list[tuple[str, float]]] = {}  # notebook -> every measured redraw
ELAPSED: dict[str, float] = {}  # notebook -> seconds from opening it to its last check
NBSTRIP = load_nbstrip()


def _requirements() -> str:
    browser = chromium_or_skip()
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("jupyterlab is not installed in this environment: install the notebook extra")
    return browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A JupyterLab server over prepared copies of the notebooks; yields its base URL and folder."""
    _requirements()
    import papermill

    root = tmp_path_factory.mktemp("lab")
    out = root / "out"
    for source in notebook_paths():
        params = {"device": "cpu", "output_dir": str(out), **notebook_test_parameters(source)}
        if "cache_dir" in source.read_text():
            params["cache_dir"] = str(out / "cache")
        if "hf_cache" in source.read_text():  # relative to the notebooks' folder, which these copies are not in
            params["hf_cache"] = str(ROOT / "tests" / "data" / "hf_cache" / "hub")
        papermill.execute_notebook(str(source), str(root / source.name), parameters=params, prepare_only=True,
                                   kernel_name="python3", progress_bar=False)
    port = _free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / ".config"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
           "WORKBENCH_NO_FETCH": "1"}
    log = (root / "lab.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--allow-root",
         f"--LabApp.workspaces_dir={root / '.workspaces'}", "--ServerApp.terminals_enabled=False"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start: " + (root / "lab.log").read_text()[-2000:]) from None
                time.sleep(0.3)
        yield base, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module", autouse=True)
def _print_redraws() -> Iterator[None]:
    yield
    if REDRAWS:
        print(f"\nexplorer redraws in JupyterLab (target {REDRAW_TARGET_S * 1000:.0f} ms):")
        for name, redraws in REDRAWS.items():
            if not redraws:
                continue
            times = sorted(seconds for _, seconds in redraws)
            slowest = max(redraws, key=lambda r: r[1])
            print(f"  {name}: {len(times)} actions in {ELAPSED.get(name, 0):.0f} s; redraw median "
                  f"{statistics.median(times) * 1000:.0f} ms ({statistics.median(times) / REDRAW_TARGET_S:.2f}x), "
                  f"slowest {slowest[1] * 1000:.0f} ms ({slowest[0]})")


@pytest.fixture(scope="module")
def lab_page(lab: tuple[str, Path]) -> Iterator[tuple[Any, list[str]]]:
    """One JupyterLab page for every notebook (the application loads once), in a workspace of its
    own (the default one restores what earlier sessions opened); yields it and its page errors."""
    from playwright.sync_api import sync_playwright

    base, _ = lab
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=_requirements(), args=CHROMIUM_ARGS)
        try:
            page = chromium.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{base}/lab/workspaces/explorers?reset&token={TOKEN}")
            page.wait_for_function("() => !!(window.jupyterapp && window.jupyterapp.shell)", timeout=60_000)
            page.evaluate("async () => { await window.jupyterapp.restored; }")  # the workspace is laid out
            yield page, errors
        finally:
            chromium.close()


# ---- the notebook --------------------------------------------------------------------------------

OPENED = """(path) => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(panel && panel.content && panel.context && panel.context.path === path);
}"""
KERNEL_READY = """() => {
  const session = window.jupyterapp.shell.currentWidget.sessionContext.session;
  return !!(session && session.kernel && session.kernel.status === 'idle');
}"""
# Every message the kernel sends that carries a traceback: a cell's error, or one sent outside any
# cell (a widget callback's), which JupyterLab shows in its log console only.
LISTEN = """() => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  window.__tracebacks = [];
  kernel.iopubMessage.connect((_, msg) => {
    const type = msg.header.msg_type, content = msg.content;
    if (type === 'error') window.__tracebacks.push(content.ename + ': ' + content.evalue);
    if (type === 'stream' && content.name === 'stderr' && /Traceback/.test(content.text))
      window.__tracebacks.push(content.text.slice(-400));
  });
}"""
# Runs the cells at the given indices one after the other (each awaited), then reports the errors.
RUN_CELLS = """async (indices) => {
  const app = window.jupyterapp, panel = app.shell.currentWidget, notebook = panel.content;
  app.shell.activateById(panel.id);
  for (const i of indices) {
    notebook.activeCellIndex = i;
    await app.commands.execute('notebook:run-cell');
  }
  const cells = notebook.model.cells, errors = [];
  for (const i of indices) {
    for (const o of cells.get(i).outputs.toJSON()) if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
  }
  return errors;
}"""
SCROLL_TO = """async (i) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  notebook.activeCellIndex = i;
  await notebook.scrollToItem(i, 'start');
}"""
SAVE = """async () => {
  const app = window.jupyterapp;
  app.shell.activateById(app.shell.currentWidget.id);
  await app.commands.execute('docmanager:save');
}"""
OPEN = """(path) => { window.jupyterapp.commands.execute('docmanager:open', {path}); }"""
# The notebook's kernel shut down and its tab closed (saved first: no dialog), so the next one is current.
CLOSE = """async () => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.sessionContext) return;
  await Promise.race([panel.sessionContext.shutdown(), new Promise(done => setTimeout(done, 5000))]);
  panel.dispose();
}"""


def cells_to_run(path: Path) -> tuple[list[int], int]:
    """The cells the widget needs (the parameters, papermill's injected ones, their check) and the widget's cell."""
    cells = json.loads(path.read_text())["cells"]
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    tagged = [i for i in code if {"parameters", "injected-parameters"} & set(c_tags(cells[i]))]
    check = next(i for i in code if i > max(tagged))
    widget = next(i for i in code if WIDGET_CALL.search("".join(cells[i]["source"])))
    return [*tagged, check, widget], widget


def c_tags(cell: dict[str, Any]) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


# ---- what the explorer shows ---------------------------------------------------------------------

# The figure's plotly div: the FigureWidget's own element, classed by the explorer
FIGURE_CSS = ".workbench-figure.js-plotly-plot, .workbench-figure .js-plotly-plot"

VIEW = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  if (!box) return null;
  const line = box.querySelector('.workbench-outcome'), marker = box.querySelector('[data-redraw]');
  const gd = box.querySelector(FIGURE), title = box.querySelector('.workbench-figure .gtitle');
  const meta = gd && gd.layout && gd.layout.meta;
  return {line: line ? line.textContent : '', title: title ? title.textContent : '',
          redraw: marker ? Number(marker.dataset.redraw) : -1, figure: gd ? (meta ? meta.redraw : -1) : null,
          tracebacks: window.__tracebacks || []};
}"""
# The time of the first input event after arming, and the time the explorer first showed a redraw
# numbered past the current one whole (line and figure), watched by a MutationObserver in the page.
# Returns the current redraw's number.
ARM = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  const first = box.querySelector('[data-redraw]'), after = first ? Number(first.dataset.redraw) : -1;
  if (!window.__workbench) {
    window.__workbench = {};
    for (const type of ['change', 'keydown', 'input', 'pointerdown'])
      document.addEventListener(type, () => {
        const w = window.__workbench;
        if (w.armed && w.start === null) w.start = performance.now();
      }, {capture: true});
  }
  const w = window.__workbench;
  if (w.observer) w.observer.disconnect();
  Object.assign(w, {armed: true, start: null, shown: null});
  const done = () => {
    const marker = box.querySelector('[data-redraw]'), gd = box.querySelector(FIGURE);
    const redraw = marker ? Number(marker.dataset.redraw) : -1;
    const figure = gd ? (gd.layout && gd.layout.meta ? gd.layout.meta.redraw : -1) : redraw;
    if (redraw > after && figure === redraw && w.shown === null) w.shown = performance.now();
  };
  w.observer = new MutationObserver(done);
  w.observer.observe(box, {subtree: true, childList: true, characterData: true, attributes: true});
  return after;
}"""
# The explorer's first draw is on the page whole: its line and, where it has one, its figure with its title.
FIRST_DRAW = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  const marker = box && box.querySelector('[data-redraw]');
  if (!marker) return false;
  const gd = box.querySelector(FIGURE);
  if (!box.querySelector('.workbench-figure')) return true;
  return !!(gd && gd.layout && gd.layout.meta && gd.layout.meta.redraw === Number(marker.dataset.redraw)
            && box.querySelector('.workbench-figure .gtitle'));
}"""
# The newest draw is whole: not the preflight box's announcement of a check still running
SETTLED = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  const marker = box.querySelector('[data-redraw]');
  return !marker || marker.dataset.state !== 'pending';
}"""
SEEN = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  const marker = box.querySelector('[data-redraw]');
  return {start: window.__workbench.start, shown: window.__workbench.shown, redraw: marker ? Number(marker.dataset.redraw) : -1};
}"""
VIEW, ARM, FIRST_DRAW = (js.replace("querySelector(FIGURE)", f"querySelector('{FIGURE_CSS}')") for js in (VIEW, ARM, FIRST_DRAW))
SETTLE_S = 0.25  # a typed value may redraw twice (a new batch list, then its value): wait for quiet
UNNAMED = ("newest modelled", "default (installed, else newest)")  # options whose text the explorer does not repeat
# (it names the version chosen instead, and why)


def _clean(text: str) -> str:
    """Text as a person reads it: plotly draws a title's <br> as a zero-width space, a dropdown's
    option may hold non-breaking spaces."""
    return " ".join(str(text).replace("\u200b", " ").replace("\xa0", " ").split())


def view(page: Any) -> dict[str, Any]:
    shown = page.evaluate(VIEW)
    assert shown is not None, "no explorer in the notebook's outputs"
    return {**shown, "line": _clean(shown["line"]), "title": _clean(shown["title"])}


class Driver:
    """Works one explorer: each action must redraw it, whole, and leave it agreeing with itself."""

    def __init__(self, page: Any, name: str, agrees: Callable[[dict[str, Any]], bool]) -> None:
        self.page, self.name, self.agrees = page, name, agrees
        self.redraws: list[tuple[str, float]] = REDRAWS.setdefault(name, [])

    def act(self, what: str, action: Callable[[], None], named: str = "", settle: bool = False,
            announced_as: str = "") -> dict[str, Any]:
        """Does ``action`` and checks the redraw; a preflight check still running must be announced
        naming ``announced_as`` (default ``named``: the release chosen; an edited command names its
        release, the one the dropdown shows)."""
        self.page.evaluate(ARM)
        action()
        deadline = time.monotonic() + 20
        while True:
            seen = self.page.evaluate(SEEN)  # ``shown``: a redraw past ``before``, line and figure both
            if seen["shown"] is not None:
                if not settle:
                    break
                time.sleep(SETTLE_S)
                if self.page.evaluate(SEEN)["redraw"] == seen["redraw"]:
                    break
            assert time.monotonic() < deadline, f"{self.name}: {what}: no redraw within 20 s (shows {view(self.page)})"
            time.sleep(0.02)
        assert seen["start"] is not None, f"{self.name}: {what}: no input event reached the page"
        elapsed = (seen["shown"] - seen["start"]) / 1000
        self.redraws.append((what, elapsed))
        assert elapsed <= REDRAW_LIMIT_S, f"{self.name}: {what}: redrawn {elapsed:.1f} s after the input"
        if not self.page.evaluate(SETTLED):
            announced = view(self.page)["line"]
            expected = announced_as or named
            assert expected in announced, f"{self.name}: {what}: the announcement does not name {expected!r}: {announced}"
            self.page.wait_for_function(SETTLED, timeout=CHECK_S * 1000)
        now = view(self.page)
        assert not now["tracebacks"], f"{self.name}: {what}: a traceback: {now['tracebacks']}"
        assert not now["line"].startswith("error:"), f"{self.name}: {what}: {now['line']}"
        assert self.agrees(now), f"{self.name}: {what}: the figure and the line disagree: {now}"
        if named and not now["line"].startswith("invalid:"):
            assert named in now["title"] + " " + now["line"], f"{self.name}: {what}: {named!r} is not shown: {now}"
        return now

    # ---- the controls, found in the page ----

    def controls(self, css: str) -> list[str]:
        box = self.page.locator(".workbench-explorer")
        return [_clean(label) for label in box.locator(f"{css} label").all_inner_texts() if label.strip()]

    def control(self, css: str, label: str) -> Any:
        box = self.page.locator(".workbench-explorer")
        found = box.locator(css).filter(has=self.page.locator("label", has_text=re.compile(f"^{re.escape(label)}$")))
        assert found.count() == 1, f"{self.name}: no control labelled {label!r}"
        return found

    def every_option(self, label: str, once: bool = False) -> int:
        """Selects every option of the dropdown but the one shown, in order, then the first again
        (``once``: the next option only)."""
        select = self.control(".widget-dropdown", label).locator("select")
        options = [_clean(o) for o in select.locator("option").all_inner_texts()]
        current = int(select.evaluate("s => s.selectedIndex"))
        chosen = [i for i in range(len(options)) if i != current] + ([current] if len(options) > 1 else [])
        chosen = chosen[:1] if once else chosen
        for index in chosen:
            option = options[index]
            named = "" if option in UNNAMED else option.split(" (")[0]
            self.act(f"{label} -> {option}", lambda i=index: select.select_option(index=i, force=True), named)
        return len(chosen)

    def every_stop(self, label: str, once: bool = False) -> int:
        """Moves the slider to its first stop (Home), then one stop at a time (ArrowRight) to its last
        (``once``: one stop)."""
        handle = self.control(".widget-slider", label).locator(".noUi-handle").first
        low, high, now = (float(handle.get_attribute(a) or 0) for a in ("aria-valuemin", "aria-valuemax", "aria-valuenow"))
        step = float(handle.evaluate("h => h.closest('.noUi-target').noUiSlider.options.step || 1"))
        handle.focus()  # the slider keeps the keyboard focus: every later key goes to it
        keyboard = self.page.keyboard
        if once:
            self.act(f"{label} slider one stop", lambda: keyboard.press("ArrowLeft" if now == high else "ArrowRight"))
            return 1
        if now != low:
            self.act(f"{label} slider -> its first stop", lambda: keyboard.press("Home"))
        stops = round((high - low) / step)
        for stop in range(1, stops + 1):
            self.act(f"{label} slider -> stop {stop} of {stops}", lambda: keyboard.press("ArrowRight"))
        assert float(handle.get_attribute("aria-valuenow") or 0) == high, f"{self.name}: {label} did not reach its last stop"
        return stops + (now != low)

    def set_text(self, field: Any, text: str) -> None:
        """Give a ``continuous_update=False`` text area ``text`` and let its value reach the kernel
        before anything else is pressed: the value is sent when the area loses focus, and
        ipywidgets holds a model's update back while the kernel is busy with that model's last
        one, so a button pressed at once can reach the kernel first and be read with the old text
        (seen on a loaded CI machine)."""
        field.fill(text)
        field.press("Tab")  # the change event: the value is sent (or queued behind a busy kernel)
        for _ in range(2):  # a queued update goes out once the kernel is idle; then it is processed
            time.sleep(SETTLE_S)
            self.page.wait_for_function(KERNEL_READY, timeout=CHECK_S * 1000)

    def type_value(self, label: str, value: str, named: str) -> dict[str, Any]:
        def typed() -> None:
            field = self.control(".widget-text", label).locator("input")
            field.select_text()
            field.press_sequentially(value)
            field.press("Enter")
        return self.act(f"typed {label} {value}", typed, named, settle=True)


# ---- agreement: the figure shows what the line says -----------------------------------------------


def _invalid(now: dict[str, Any]) -> bool:
    """A state the engine cannot be in: the line says why and the figure says there is none."""
    return now["line"].startswith("invalid:") and now["title"].startswith("no figure: invalid:")


def table_agrees(now: dict[str, Any]) -> bool:
    """The figure's explored step (title: 'at s = N: OUTCOME (..., buffer X tokens, ...)') is the
    outcome line's ('OUTCOME: component [rule] mode s=N W=... buffer=B', B in pages or tokens)."""
    if _invalid(now):
        return True
    title = re.search(r"ps (\d+) .* at s = ([\d,]+): ([a-z-]+) .* buffer ([\d,]+) tokens", now["title"])
    line = re.match(r"([a-z-]+): \S+ \[(\S+)\] \S+ s=(\d+) W=\d+ buffer=(\d+)", now["line"])
    if not title or not line:
        return False
    ps, s, outcome, capacity = int(title[1]), int(title[2].replace(",", "")), title[3], int(title[4].replace(",", ""))
    rule_in_title = f"rule {line[2]} " in now["title"]
    return rule_in_title and outcome == line[1] and s == int(line[3]) and capacity in (int(line[4]), int(line[4]) * ps)


def allocator_agrees(now: dict[str, Any]) -> bool:
    """Title: 'gather G ... F free pages for K needed: OUTCOME'; line: 'OUTCOME: alloc_decode[G] ... free_pages=[...]'."""
    title = re.search(r"gather (\S+) .* (\d+) free pages for \d+ needed: ([a-z-]+)", now["title"])
    line = re.match(r"([a-z-]+): alloc_decode\[(\S+)\] .* free_pages=\[([\d, ]*)\]", now["line"])
    if not title or not line:
        return _invalid(now)
    free = len([p for p in line[3].split(",") if p.strip()])
    return title[1] == line[2] and title[3] == line[1] and int(title[2]) == free


# How the run explorer's line starts for each stop reason its figure's title names
RUN_STOPS = {"failure": ("fails loudly at step ", "fails silently at step "), "completed": ("completed: ",),
             "out-of-memory": ("stopped: the allocator ran out of memory",), "max-steps": ("stopped at the simulation's",)}


def run_agrees(now: dict[str, Any]) -> bool:
    """Title: '... rule R · gather G · run seed S STOP after N steps'; line: 'fails loudly at step K: ... after N
    steps' (or 'completed: ... after N steps', ...)."""
    title = re.search(r"rule (\S+) · gather (\S+) · run seed (\d+) (\S+) after (\d+) steps", now["title"])
    steps = re.search(r" after (\d+) steps", now["line"])
    return bool(title and steps and now["line"].startswith(RUN_STOPS.get(title[4], ("?",))) and title[5] == steps[1]) \
        or _invalid(now)


def preflight_agrees(now: dict[str, Any]) -> bool:
    """The printed check: 'exit status N' first, and a verdict that says the same (0 SAFE, 1 FAILS,
    2 a one-line error)."""
    status = re.match(r"exit status (\d)", now["line"])
    expected = {"0": "verdict: SAFE", "1": "verdict: FAILS", "2": "error: ", "3": "verdict: "}
    return bool(status and expected.get(status[1], "?") in now["line"])


# ---- the notebooks -------------------------------------------------------------------------------

KIND = {"explorer": "table", "run_explorer": "run", "preflight_box": "preflight"}
# Every notebook that shows a widget (05, the atlas, is a figure and a table: nothing to operate)
NOTEBOOKS = [path.stem for path in notebook_paths() if WIDGET_CALL.search(path.with_suffix(".py").read_text())]


def _kind(name: str) -> str:
    call = WIDGET_CALL.search((NOTEBOOKS_DIR / f"{name}.py").read_text())
    assert call is not None
    source = (NOTEBOOKS_DIR / f"{name}.py").read_text()
    return "allocator" if call[1] == "explorer" and 'explorer("allocator"' in source else KIND[call[1]]


AGREES = {"table": table_agrees, "allocator": allocator_agrees, "run": run_agrees, "preflight": preflight_agrees}


def widget_call(name: str) -> str:
    """The notebook's widget call, as its source says it (arguments included)."""
    source = (NOTEBOOKS_DIR / f"{name}.py").read_text()
    call = WIDGET_CALL.search(source)
    assert call is not None
    return source[call.start():source.index("\n\n", call.start())]


def driven_elsewhere(name: str) -> str | None:
    """A later notebook that shows the very same explorer (same call, same arguments): there every
    option of it is driven, here each control once (00's explorer is 01's)."""
    return next((other for other in NOTEBOOKS if other > name and widget_call(other) == widget_call(name)), None)


# The preflight answer's fix, with the command's text area scrolled to the top of the view (where a
# person pasting a command looks): its box in the viewport, and its line's widths (a line that
# scrolls sideways has a scrollWidth past its clientWidth).
FIX_SEEN = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  box.querySelector('textarea').scrollIntoView({block: 'start'});
  const fix = box.querySelector('.workbench-fix');
  if (!fix) return null;
  const line = fix.closest('.workbench-answer'), r = fix.getBoundingClientRect();
  return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: window.innerWidth,
          height: window.innerHeight, scroll: line.scrollWidth, client: line.clientWidth, text: line.textContent};
}"""


def fix_in_view(driver: Driver, shots: Path | None) -> dict[str, Any]:
    """The fix of the answer shown is visible as the box is looked at: inside the viewport, its line
    wrapped (no sideways scroll); a screenshot of the page for a person is saved under ``shots``."""
    seen = driver.page.evaluate(FIX_SEEN)
    time.sleep(SETTLE_S)  # JupyterLab redraws the cells scrolled to
    seen = driver.page.evaluate(FIX_SEEN)
    assert seen is not None, f"{driver.name}: the answer shows no fix: {view(driver.page)['line'][:300]}"
    assert seen["left"] >= 0 and seen["right"] <= seen["width"], f"{driver.name}: the fix is cut off sideways: {seen}"
    assert seen["top"] >= 0 and seen["bottom"] <= seen["height"], f"{driver.name}: the fix is out of view: {seen}"
    assert seen["scroll"] <= seen["client"], f"{driver.name}: the fix's line scrolls sideways: {seen}"
    if shots is not None:
        driver.page.screenshot(path=str(shots / f"{driver.name}-fix.png"))
        print(f"\n{driver.name}: the fix as a person sees it: {shots / f'{driver.name}-fix.png'}")
    return seen


def drive(driver: Driver, kind: str, once: bool = False, shots: Path | None = None) -> int:
    """Every dropdown option, every slider stop, and a typed value of each text box (``once``: one
    option or stop of each control); the action count. The preflight box ends on a failing command
    pasted back, its fix in view (``fix_in_view``; screenshots under ``shots``)."""
    count = 0
    for label in driver.controls(".widget-dropdown"):
        count += driver.every_option(label, once)
    for label in driver.controls(".widget-slider"):
        count += driver.every_stop(label, once)
    if kind == "table":
        driver.type_value("context len", "4096", "ctx 4,096")
    elif kind == "allocator":
        now = driver.type_value("batch rows", "5", "")
        assert re.search(r"seq_lens=\[[\d, ]+\]", now["line"]), now
    elif kind == "run":
        driver.type_value("run seed", "3", "run seed 3")
    else:  # the preflight box: an edited command, read when check is pressed
        field = driver.control(".widget-textarea", "command").locator("textarea")
        failing = field.input_value()  # the notebook's command under its test release: a failure a run reaches
        chosen = driver.control(".widget-dropdown", "engine").locator("select").evaluate(
            "s => s.options[s.selectedIndex].text")
        release = "the default release" if _clean(chosen) in UNNAMED else _clean(chosen)  # what an announcement names
        driver.set_text(field, field.input_value().replace("--context-length 32768", "--context-length 4096"))
        check = driver.page.locator(".workbench-explorer button", has_text="check")
        driver.act("command edited to --context-length 4096, check pressed", check.click, "context_length 4096",
                   settle=True, announced_as=release)

        command = field.input_value()  # node 0 and node 1 of one text: each launch is checked
        driver.set_text(field, f"# node 0\n{command}\n# node 1\n{command}")
        now = driver.act("the command twice, as node 0 and node 1", check.click, "verdict of the text:", settle=True,
                         announced_as=release)
        assert "== launch 1 of 2" in now["line"] and "== launch 2 of 2" in now["line"], now
        if os.environ.get("WORKBENCH_SCREENSHOTS"):  # a folder: what the box shows, for a person to look at
            driver.page.locator(".workbench-explorer").screenshot(path=f"{os.environ['WORKBENCH_SCREENSHOTS']}/"
                                                                      f"{driver.name}-two-launches.png")
        driver.set_text(field, failing)
        now = driver.act("the failing command pasted back, check pressed", check.click, "exit status 1", settle=True,
                         announced_as=release)
        assert now["line"].startswith("exit status 1"), now
        fix_in_view(driver, shots)
        return count + 3
    return count + 1


def test_every_notebook_with_a_widget_is_driven() -> None:
    assert NOTEBOOKS, "no notebook shows a widget: WIDGET_CALL no longer matches the notebooks' calls"
    assert {_kind(name) for name in NOTEBOOKS} == set(AGREES), "a kind of explorer this test cannot check"
    # An explorer driven once per control is driven in full by the notebook named for it
    for name in NOTEBOOKS:
        twin = driven_elsewhere(name)
        assert twin is None or driven_elsewhere(twin) is None, (name, twin)


def test_the_agreement_checks_can_fail() -> None:
    """The checks below reject a figure that shows another state than the line, and an error line."""
    good = {"title": "npu-block-table · rule context · target-verify · ctx 32,768 · ps 128 · D 16 · g1 · NGRAM topk 10 "
                     "at s = 32,769: shape-error (reads 32,785 tokens; buffer 32,768 tokens, W 32,788)",
            "line": "shape-error: npu-block-table [context] target-verify s=32769 W=32788 buffer=256 -- ..."}
    assert table_agrees(good)
    assert not table_agrees({**good, "line": good["line"].replace("s=32769", "s=32768")})
    assert not table_agrees({**good, "line": "error: IndexError: single positional indexer is out-of-bounds"})
    run = {"title": "exact-fit · rule context · gather npu-legacy · run seed 1 failure after 6 steps; first failure at "
                    "step 5: index-error",
           "line": "fails loudly at step 5: request 3 at committed length 41, in the allocator's decode gather "
                   "(npu-legacy): the step raises an index error (index-error); the run stops after 6 steps"}
    assert run_agrees(run)
    assert not run_agrees({**run, "line": run["line"].replace("after 6 steps", "after 7 steps")})
    assert not run_agrees({**run, "line": "completed: every request finished after 6 steps, no step failed"})


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_control_of_the_explorer_redraws_it_in_jupyterlab(name: str, lab: tuple[str, Path],
                                                                 lab_page: tuple[Any, list[str]]) -> None:
    _, root = lab
    page, errors = lab_page
    errors.clear()
    started = time.monotonic()
    page.evaluate(OPEN, f"{name}.ipynb")
    try:
        page.wait_for_function(OPENED, arg=f"{name}.ipynb", timeout=60_000)
        page.wait_for_function(KERNEL_READY, timeout=60_000)
        page.evaluate(LISTEN)
        indices, widget = cells_to_run(root / f"{name}.ipynb")
        cell_errors = page.evaluate(RUN_CELLS, indices)
        assert not cell_errors, f"{name}: {cell_errors}"
        page.evaluate(SCROLL_TO, widget)  # JupyterLab draws only the cells near the viewport
        explorer = page.locator(".workbench-explorer")
        explorer.wait_for(timeout=CELL_S * 1000)
        if explorer.locator(".workbench-figure").count():
            explorer.locator(".workbench-figure").scroll_into_view_if_needed()  # plotly lays out a visible figure
        kind = _kind(name)
        driver = Driver(page, name, AGREES[kind])
        page.wait_for_function(FIRST_DRAW, timeout=60_000)
        first = view(page)
        assert AGREES[kind](first) and not first["line"].startswith("error:"), f"{name}: the first draw: {first}"
        if kind == "preflight":  # a verdict on the notebook's own command, not a model it could not find
            assert first["line"].startswith(("exit status 0", "exit status 1")), f"{name}: the first draw: {first}"
        twin = driven_elsewhere(name)
        actions = drive(driver, kind, once=twin is not None, shots=root)
        assert actions >= (8 if twin or kind == "preflight" else 10), f"{name}: only {actions} actions: controls not found"
        page.evaluate(SAVE)
        saved = (root / f"{name}.ipynb").read_bytes()
        assert any(cell.get("outputs") for cell in json.loads(saved)["cells"]), f"{name}: saved without its outputs"
        committed = (NOTEBOOKS_DIR / f"{name}.ipynb").read_bytes()
        assert NBSTRIP.clean(saved) == committed, f"{name}: the clean filter's form of the save is not the committed file"
        assert errors == [], f"{name}: page errors {errors}"
    finally:
        ELAPSED[name] = time.monotonic() - started
        page.evaluate(CLOSE)
