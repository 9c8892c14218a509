"""Every notebook's explorer, operated by a person in JupyterLab in a real (headless) Chromium.

JupyterLab starts on a free local port over copies of the notebooks with their small test
parameters injected (papermill's ``prepare_only``). For each notebook the test opens it, runs all
cells, then works the explorer as a person would: picks a dropdown entry, moves a slider with the
keyboard, types a value and presses Enter. After each action the figure *in the explorer's own
output* must show the new configuration and the outcome line under the controls must agree with
it. (A figure handed to ``Output.append_display_data`` lands in JupyterLab's log console instead:
the title in the notebook never changes and this test fails.)

Every redraw is timed in the page, from the input event to the new figure, and printed with its
ratio to the 500 ms target (issue 15). The test fails only past ``REDRAW_LIMIT_S``: a figure a
person waits seconds for is broken on any machine, while the target itself is a number for a
benchmark, not an assertion (CI's two cores run JupyterLab, the kernel, Chromium and pytest at
once, and its redraws took up to 1.1 s where an idle machine's take well under the target).

Needs Debian's chromium (never a downloaded browser) and playwright; without them it skips and says
how to enable them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser import CHROMIUM_ARGS, chromium_or_skip

from workbench.present.report import NOTEBOOKS_DIR, notebook_paths, notebook_test_parameters

# From the input event to the new figure and outcome line, in the page.
REDRAW_TARGET_S = 0.5  # issue 15's target: printed against every measured redraw
REDRAW_LIMIT_S = 5.0  # asserted: slower than this is broken, however busy the machine
RUN_ALL_S = 240  # running every cell of one notebook with its small parameters
RUN_ALL_RETRY_S = 15  # a run-all that started nothing (kernel idle, no cell counted) is sent again
# The cell that shows a notebook's widget: one of these calls at the start of a line.
WIDGET_CALL = re.compile(r"^(explorer|run_explorer|preflight_box)\(", re.MULTILINE)
TOKEN = "workbench-explorer-test"
REDRAWS: list[tuple[str, float]] = []  # every measured redraw, printed at the end of the module
RETRIES: list[str] = []  # notebooks whose run-all had to be sent again


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
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab server over prepared copies of the notebooks; yields its base URL."""
    _requirements()
    import papermill

    root = tmp_path_factory.mktemp("lab")
    out = root / "out"
    for source in notebook_paths():
        params = {"device": "cpu", "output_dir": str(out), **notebook_test_parameters(source)}
        if "cache_dir" in source.read_text():
            params["cache_dir"] = str(out / "cache")
        papermill.execute_notebook(str(source), str(root / source.name), parameters=params, prepare_only=True,
                                   kernel_name="python3", progress_bar=False)
    port = _free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / ".config"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
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
        yield base
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
        print(f"\nexplorer redraws in JupyterLab, ms (x the {REDRAW_TARGET_S * 1000:.0f} ms target):")
        for what, seconds in REDRAWS:
            print(f"  {what}: {seconds * 1000:.0f} ({seconds / REDRAW_TARGET_S:.2f}x)")
    if RETRIES:
        print("run-all sent again for:", ", ".join(RETRIES))


@pytest.fixture(scope="module")
def browser(lab: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=_requirements(), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


# ---- driving one notebook ------------------------------------------------------------------------

OPENED = """(path) => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(panel && panel.content && panel.context && panel.context.path === path);
}"""
KERNEL_IDLE = """() => {
  const session = window.jupyterapp.shell.currentWidget.sessionContext.session;
  return !!(session && session.kernel && session.kernel.status === 'idle');
}"""
# The command acts on the notebook tracker's current widget: activate ours first. Not awaited (a
# run takes minutes): polled below, and a rejection kept for the failure message.
RUN_ALL = """() => {
  const app = window.jupyterapp, panel = app.shell.currentWidget;
  app.shell.activateById(panel.id);
  window.__runAll = 'sent';
  app.commands.execute('notebook:run-all-cells').catch(e => { window.__runAll = 'rejected: ' + e; });
}"""
SCROLL_TO_EXPLORER = r"""async (pattern) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const cells = notebook.model.cells;
  const call = new RegExp(pattern, 'm');
  for (let i = 0; i < cells.length; i++) {
    if (call.test(cells.get(i).sharedModel.getSource())) {
      notebook.activeCellIndex = i;
      await notebook.scrollToItem(i, 'start');
      return i;
    }
  }
  return -1;
}"""
SHUT_DOWN = """() => Promise.race([window.jupyterapp.serviceManager.sessions.shutdownAll(),
                              new Promise(done => setTimeout(done, 5000))])"""

STATE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.model.cells;
  const code = [];
  for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code' || cell.sharedModel.getSource().trim() === '') continue;
    const errors = cell.outputs.toJSON().filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue);
    code.push({count: cell.executionCount, errors});
  }
  const status = panel.sessionContext.session && panel.sessionContext.session.kernel
    ? panel.sessionContext.session.kernel.status : 'none';
  return {status, code};
}"""

VIEW = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  if (!box) return null;
  const title = box.querySelector('.workbench-figure .gtitle');
  const line = box.querySelector('.workbench-outcome');
  return {title: title ? title.textContent : '', line: line ? line.textContent : ''};
}"""


def run_all_cells(page: Any, name: str) -> None:
    """Run every cell and wait for the last. A run-all that started nothing (the kernel idle, no
    cell counted, e.g. sent while JupyterLab still settles the new notebook) is sent again, at most
    twice, and the retries are printed with the redraws."""
    page.wait_for_function(KERNEL_IDLE, timeout=60_000)
    page.evaluate(RUN_ALL)
    start = sent = time.monotonic()
    retries = 0
    while True:
        state = page.evaluate(STATE)
        errors = [e for cell in state["code"] for e in cell["errors"]]
        assert not errors, f"{name}: {errors}"
        if state["status"] == "idle" and all(cell["count"] for cell in state["code"]):
            return
        started = state["status"] != "idle" or any(cell["count"] for cell in state["code"])
        if not started and time.monotonic() - sent > RUN_ALL_RETRY_S and retries < 2:
            retries += 1
            RETRIES.append(name)
            page.evaluate(RUN_ALL)
            sent = time.monotonic()
        assert time.monotonic() - start < RUN_ALL_S, (
            f"{name}: cells still running after {RUN_ALL_S} s (run-all {page.evaluate('window.__runAll')},"
            f" sent {retries + 1} times): {state}")
        time.sleep(0.5)


def view(page: Any) -> dict[str, str]:
    shown = page.evaluate(VIEW)
    assert shown is not None, "no explorer in the notebook's outputs"
    return _clean(shown)


def _clean(shown: dict[str, Any]) -> dict[str, str]:
    # plotly draws a title's <br> as a zero-width space
    return {key: " ".join(str(shown[key]).replace("\u200b", " ").split()) for key in ("title", "line")}


# In the page: the time of the first input event after arming, and every (title, line) the explorer
# shows after it with the time it appeared (a MutationObserver, so the harness's polling adds nothing).
ARM = """() => {
  const box = window.jupyterapp.shell.currentWidget.node.querySelector('.workbench-explorer');
  const read = () => {
    const title = box.querySelector('.workbench-figure .gtitle'), line = box.querySelector('.workbench-outcome');
    return {title: title ? title.textContent : '', line: line ? line.textContent : ''};
  };
  if (!window.__workbench) {
    window.__workbench = {start: null, shown: []};
    for (const type of ['change', 'keydown', 'input', 'pointerdown'])
      document.addEventListener(type, () => {
        if (window.__workbench.armed && window.__workbench.start === null) window.__workbench.start = performance.now();
      }, {capture: true});
  }
  const w = window.__workbench;
  if (w.observer) w.observer.disconnect();
  Object.assign(w, {armed: true, start: null, shown: []});
  w.observer = new MutationObserver(() => {
    const now = read(), last = w.shown[w.shown.length - 1];
    if (!last || last.title !== now.title || last.line !== now.line) w.shown.push({...now, t: performance.now()});
  });
  w.observer.observe(box, {subtree: true, childList: true, characterData: true, attributes: true});
}"""
SEEN = "() => ({start: window.__workbench.start, shown: window.__workbench.shown})"


def act(page: Any, action: Callable[[], None], changed: Callable[[dict[str, str]], bool], what: str) -> dict[str, str]:
    """Do ``action``; the explorer's figure and line must come to satisfy ``changed``, timed in the
    page from the input event."""
    before = view(page)
    page.evaluate(ARM)
    action()
    deadline = time.monotonic() + 10
    while True:
        seen = page.evaluate(SEEN)
        for shown in seen["shown"]:
            now = _clean(shown)
            # A figure's title and the line both change (a box without a figure has no title)
            if (now["title"] != before["title"] or not now["title"]) and now["line"] != before["line"] and changed(now):
                assert seen["start"] is not None, f"{what}: no input event reached the page"
                elapsed = (shown["t"] - seen["start"]) / 1000
                REDRAWS.append((what, elapsed))
                assert elapsed <= REDRAW_LIMIT_S, f"{what}: redrawn {elapsed:.1f} s after the input (limit {REDRAW_LIMIT_S} s)"
                return now
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: the explorer's figure did not show the new state: before {before}, now {view(page)}")
        time.sleep(0.05)


def control(page: Any, kind: str, label: str) -> Any:
    """An ipywidgets control of the explorer by its kind (dropdown, slider, text) and label."""
    box = page.locator(".workbench-explorer")
    css = {"dropdown": ".widget-dropdown", "slider": ".widget-slider", "text": ".widget-text",
           "textarea": ".widget-textarea"}[kind]
    found = box.locator(css).filter(has=page.locator("label", has_text=re.compile(f"^{re.escape(label)}$")))
    assert found.count() == 1, f"no {kind} labelled {label!r}"
    return found


def choose(page: Any, label: str, option: str) -> Callable[[], None]:
    return lambda: control(page, "dropdown", label).locator("select").select_option(label=option)


def nudge(page: Any, label: str, key: str) -> Callable[[], None]:
    def press() -> None:
        handle = control(page, "slider", label).locator(".noUi-handle").first
        handle.focus()
        handle.press(key)
    return press


def type_value(page: Any, label: str, value: str) -> Callable[[], None]:
    """Types the digits (the clock starts at the first key, so typing time counts) and presses Enter."""
    def typed() -> None:
        field = control(page, "text", label).locator("input")
        field.select_text()
        field.press_sequentially(value)
        field.press("Enter")
    return typed


def edit_and_check(page: Any, label: str, old: str, new: str) -> Callable[[], None]:
    """Replaces ``old`` by ``new`` in the text area (one input event, as a paste) and presses *check*."""
    def edited() -> None:
        field = control(page, "textarea", label).locator("textarea")
        text = field.input_value()
        assert old in text, f"{old!r} is not in the {label} box: {text!r}"
        field.fill(text.replace(old, new))
        page.locator(".workbench-explorer button", has_text="check").click()
    return edited


# ---- what each explorer shows ----------------------------------------------------------------------


def table_agrees(now: dict[str, str]) -> bool:
    """The figure's explored step (title: 'at s = N: OUTCOME (..., buffer X tokens, ...)') is the
    outcome line's ('OUTCOME: component [rule] mode s=N W=... buffer=B', B in pages or tokens)."""
    title = re.search(r"ps (\d+) .* at s = ([\d,]+): ([a-z-]+) .* buffer ([\d,]+) tokens", now["title"])
    line = re.match(r"([a-z-]+): \S+ \[(\S+)\] \S+ s=(\d+) W=\d+ buffer=(\d+)", now["line"])
    if not title or not line:
        return False
    ps, s, outcome, capacity = int(title[1]), int(title[2].replace(",", "")), title[3], int(title[4].replace(",", ""))
    rule_in_title = f"rule {line[2]} " in now["title"]
    return rule_in_title and outcome == line[1] and s == int(line[3]) and capacity in (int(line[4]), int(line[4]) * ps)


def allocator_agrees(now: dict[str, str]) -> bool:
    """Title: 'gather G ... F free pages for K needed: OUTCOME'; line: 'OUTCOME: alloc_decode[G] ... free_pages=[...]'."""
    title = re.search(r"gather (\S+) .* (\d+) free pages for \d+ needed: ([a-z-]+)", now["title"])
    line = re.match(r"([a-z-]+): alloc_decode\[(\S+)\] .* free_pages=\[([\d, ]*)\]", now["line"])
    if not title or not line:
        return False
    free = len([p for p in line[3].split(",") if p.strip()])
    return title[1] == line[2] and title[3] == line[1] and int(title[2]) == free


def run_agrees(now: dict[str, str]) -> bool:
    """Title: '... rule R · gather G · seed S STOP after N steps'; line: 'steps=N, stop_reason=STOP, ...'."""
    title = re.search(r"rule (\S+) · gather (\S+) · seed (\d+) (\S+) after (\d+) steps", now["title"])
    line = re.match(r"steps=(\d+), stop_reason=(\S+),", now["line"])
    return bool(title and line and title[4] == line[2] and title[5] == line[1])


def preflight_agrees(now: dict[str, str]) -> bool:
    """The printed check: 'exit status N' first, and a verdict that says the same (0 SAFE, 1 FAILS)."""
    status = re.match(r"exit status (\d)", now["line"])
    verdict = {"0": "verdict: SAFE", "1": "verdict: FAILS"}.get(status[1], "") if status else ""
    return bool(status and verdict and verdict in now["line"])


@dataclass(frozen=True)
class Step:
    what: str
    action: Callable[[Any], Callable[[], None]]
    expect: Callable[[dict[str, str]], bool]


def _has(text: str, agrees: Callable[[dict[str, str]], bool]) -> Callable[[dict[str, str]], bool]:
    return lambda now: text in now["title"] and agrees(now)


def _line_has(*texts: str) -> Callable[[dict[str, str]], bool]:
    return lambda now: all(text in now["line"] for text in texts) and preflight_agrees(now)


TABLE_STEPS = [
    Step("rule dropdown -> req-to-token", lambda p: choose(p, "rule", "req-to-token"), _has("rule req-to-token", table_agrees)),
    Step("typed context length 4096", lambda p: type_value(p, "context len", "4096"), _has("ctx 4,096", table_agrees)),
    Step("overshoot slider one step down", lambda p: nudge(p, "overshoot", "ArrowLeft"), _has("ctx 4,096", table_agrees)),
    Step("rule dropdown -> context", lambda p: choose(p, "rule", "context"), _has("rule context ", table_agrees)),
]
STEPS = {
    "00_overview": TABLE_STEPS,
    "01_npu_block_tables": TABLE_STEPS,
    "02_dsa_page_table": TABLE_STEPS,
    "03_allocator_exact_fit": [
        Step("gather dropdown -> npu-clamped", lambda p: choose(p, "gather", "npu-clamped"),
             _has("gather npu-clamped", allocator_agrees)),
        Step("spare pages slider one step up", lambda p: nudge(p, "spare pages", "ArrowRight"),
             _has("2 free pages for 1 needed", allocator_agrees)),
        Step("batch dropdown -> all open", lambda p: choose(p, "batch", "all open"), _has("batch all open", allocator_agrees)),
        Step("typed batch rows 5", lambda p: type_value(p, "batch rows", "5"),
             lambda now: "seq_lens=[5, 9, 13, 17, 21]" in now["line"] and allocator_agrees(now)),
    ],
    "04_serving_runs": [
        Step("gather dropdown -> npu-clamped", lambda p: choose(p, "gather", "npu-clamped"),
             _has("gather npu-clamped", run_agrees)),
        Step("typed seed 3", lambda p: type_value(p, "seed", "3"), _has("seed 3", run_agrees)),
        Step("conservativeness slider one step up", lambda p: nudge(p, "conservativeness", "ArrowRight"),
             _has("seed 3", run_agrees)),
    ],
    "06_preflight": [  # its test parameters check the QwQ command under the revert of the first fix
        Step("engine dropdown -> sglang==0.5.23", lambda p: choose(p, "engine", "sglang==0.5.23"),
             _line_has("workbench check: sglang==0.5.23 (", "exit status 0")),
        Step("command edited to --context-length 4096, check pressed",
             lambda p: edit_and_check(p, "command", "--context-length 32768", "--context-length 4096"),
             _line_has("context_length 4096 given", "exit status 0")),
        Step("engine dropdown -> the first fix reverted",
             lambda p: choose(p, "engine", "sglang==0.5.23+revert-ascend-width"),
             # the closed form for the pre-fix table (docs/semantics.md#first-failing-length): verify fails first at ctx - D + 1
             _line_has("exit status 1", f"target-verify at committed length {4096 - 16 + 1}")),
    ],
}
# Every notebook that shows a widget (05, the atlas, is a figure and a table: nothing to operate)
NOTEBOOKS = [path.stem for path in notebook_paths() if WIDGET_CALL.search(path.with_suffix(".py").read_text())]


def test_every_notebook_with_a_widget_has_explorer_steps() -> None:
    assert NOTEBOOKS, "no notebook shows a widget: WIDGET_CALL no longer matches the notebooks' calls"
    assert sorted(STEPS) == NOTEBOOKS, "add the new notebook's explorer steps to STEPS"
    for name in NOTEBOOKS:
        assert "workbench.present" in (NOTEBOOKS_DIR / f"{name}.py").read_text()


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_explorer_redraws_in_jupyterlab(name: str, lab: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    try:
        # A workspace of its own: the default one restores the notebooks earlier pages opened, each
        # with a kernel, and a run-all then runs whichever of them is current (CI: 01 and 02 never ran).
        page.goto(f"{lab}/lab/workspaces/explorer-{name}/tree/{name}.ipynb?token={TOKEN}")
        page.wait_for_function(OPENED, arg=f"{name}.ipynb", timeout=60_000)
        run_all_cells(page, name)
        page.evaluate(SCROLL_TO_EXPLORER, WIDGET_CALL.pattern)  # JupyterLab draws only the cells near the viewport
        explorer = page.locator(".workbench-explorer")
        explorer.wait_for(timeout=30_000)
        if explorer.locator(".workbench-figure").count():
            explorer.locator(".workbench-figure").scroll_into_view_if_needed()  # plotly lays out a visible figure
            explorer.locator(".workbench-figure .gtitle").wait_for(timeout=60_000)
        for step in STEPS[name]:
            act(page, step.action(page), step.expect, f"{name}: {step.what}")
    finally:
        page.evaluate(SHUT_DOWN)
        page.close()
