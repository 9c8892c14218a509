"""The notebooks' preflight box: paste a launch command, see the verdict and the fix.

A ``Textarea`` for the command, a dropdown of the modelled engine versions, a field for the model's
config file (``--model-config``: a ``config.json`` or its folder, for a model neither in the
Hugging Face cache nor on the hub), an *offline* box (``--offline``: nothing fetched from the hub)
and a *check* button, above the answer. The command is read when the box loses focus or the button
is pressed, not on every keystroke: a check resolves the command and executes its failing steps,
and a half-typed flag is bad input, not something to check.

The answer (``workbench.present.preflight_answer``) leads with the verdict's word and the fix in one
wrapped line, the release hint under it, one line per row, and what ``workbench check`` prints
folded below. ``check_text`` is the plain function the tests call, without a kernel.

A release's first check fetches its wheel (once per machine) and starts its engine process (a few
seconds): the box never waits for that on the kernel's main thread. Each change is checked on one
worker thread. The moment a change comes, the answer to the previous request is cleared and the box
says what it is doing and for which release (``data-state="pending"``: a changed release never shows
the old release's answer); when the new answer is not there within ``PROMPT_S`` that is drawn again
as a numbered redraw (a browser test times it), then the check when it comes. Only the newest request runs: a
dropdown walked quickly asks for many releases, and the ones passed over are dropped, not queued.

The CSS classes ``workbench-explorer`` (the box) and ``workbench-outcome`` (the printed check) are
the explorers' own, so the JupyterLab browser test finds this box the way it finds them.
"""

from __future__ import annotations

import html
import threading
import traceback
from concurrent import futures
from typing import Any

from workbench.engines.commands.release_choice import offered
from workbench.preflight import PreflightError
from workbench.present.preflight_answer import Answer, answer_html, checked, row_word, rows_html

NEWEST = "default (installed, else newest)"
PROMPT_S = 0.5  # an answer later than this is announced first (a person sees the click was taken)
HELP = ("<b>Preflight.</b> Paste a launch command (SGLang's <code>python -m sglang.launch_server ...</code> or "
        "<code>vllm serve ...</code>), pick the engine version it runs, then press <i>check</i> (leaving the box "
        "checks too). The model's config comes from your Hugging Face cache, else the hub (config files only); "
        "<i>model config</i> names a config.json instead. Try a <code>+revert-...</code> version to see the "
        "failure the fix removed.")
# The printed check keeps its columns (it scrolls sideways inside its fold); the answer above it wraps.
STYLE = ("<style>.workbench-preflight pre.workbench-outcome { white-space: pre; overflow-x: auto; "
         "word-break: normal; }</style>")

__all__ = ["Answer", "check_text", "checked", "pending_text", "preflight_box", "row_word", "rows_html"]


def check_text(command: str, engine: str = "", model_config: str = "", offline: bool = False) -> tuple[int, str]:
    """(exit status, text) of one check, as ``workbench check`` prints it."""
    answer = checked(command, engine, model_config, offline)
    return answer.status, answer.text


def pending_text(engine: str) -> str:
    """What the box shows while a check runs that is not immediate."""
    release = engine or "the default release"
    return (f"checking under {release} ... (a release's first check fetches its wheel, once per machine, "
            "and starts its engine process: seconds to a minute; the box redraws when it is done)")


def _drawn(number: int, state: str, inner: str) -> str:
    return f'<div data-redraw="{number}" data-state="{state}">{inner}</div>'


def _waiting(engine: str) -> str:
    return (f'<div class="workbench-outcome" style="white-space:normal"><i>{html.escape(pending_text(engine))}</i>'
            "</div>")


def preflight_box(command: str, engine: str = "", model_config: str = "", offline: bool = False) -> Any:
    """The text box, the version dropdown, the config field, the offline box and the answer,
    redrawn on every change."""
    import ipywidgets as w  # type: ignore[import-untyped]

    versions = offered()
    if engine and engine not in versions:
        raise PreflightError(f"engine: {engine!r} is not a version a check can run (allowed: {', '.join(versions)})")
    text = w.Textarea(value=command, description="command", continuous_update=False,
                      layout=w.Layout(width="100%", height="90px"))
    version = w.Dropdown(options=[(NEWEST, "")] + [(v, v) for v in versions], value=engine, description="engine",
                         layout=w.Layout(width="420px"))
    config = w.Text(value=model_config, description="model config", continuous_update=False,
                    placeholder="optional (--model-config): a config.json or its folder; else the Hugging Face cache, then the hub",
                    layout=w.Layout(width="100%"), style={"description_width": "initial"})
    hub = w.Checkbox(value=offline, description="offline (no hub fetch)", indent=False, layout=w.Layout(width="200px"))
    button = w.Button(description="check", tooltip="check the command as it stands in the box")
    shown = w.HTML(layout=w.Layout(width="100%"))
    shown.add_class("workbench-words")
    worker = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-preflight")
    lock = threading.Lock()
    state = {"asked": 0, "done": 0, "redraws": 0}

    def show(number: int, inner: str, pending: bool) -> None:
        with lock:
            if number != state["asked"] or (pending and state["done"] == number):
                return  # a newer request is on its way, or this one's check drew first
            state["done"] = state["done"] if pending else number
            state["redraws"] += 1  # numbered, so a test knows the page shows this whole draw
            shown.value = _drawn(state["redraws"], "pending" if pending else "done", inner)

    def run(number: int, command: str, engine: str, model_config: str, offline: bool) -> None:
        if number != state["asked"]:
            return  # passed over by a later change
        try:
            answer = checked(command, engine, model_config, offline)
        except Exception:  # a workbench bug: shown whole, never lost in the worker thread
            bug = "internal error (a bug in the workbench; please report it):\n" + traceback.format_exc()
            show(number, f'<pre class="workbench-outcome">{html.escape(bug)}</pre>', pending=False)
            return
        show(number, answer_html(answer), pending=False)

    def redraw(_: object = None) -> None:
        with lock:
            state["asked"] += 1
            number = state["asked"]
            # The previous answer goes at once: it answers another command or release. Marked pending (a
            # check is running) under the shown draw's number: the next draw, numbered, replaces it.
            shown.value = _drawn(state["redraws"], "pending", _waiting(version.value))
        job = worker.submit(run, number, text.value, version.value, config.value, hub.value)
        if not futures.wait([job], timeout=PROMPT_S).done:
            show(number, _waiting(version.value), pending=True)

    for control in (text, version, config, hub):
        control.observe(redraw, names="value")
    button.on_click(redraw)
    state["asked"] = 1
    run(1, command, engine, model_config, offline)  # the first draw in the cell itself: an executed notebook shows it
    box = w.VBox([w.HTML(HELP + STYLE), text, w.HBox([version, hub, button]), config, shown])
    box.add_class("workbench-explorer")
    box.add_class("workbench-preflight")
    return box
