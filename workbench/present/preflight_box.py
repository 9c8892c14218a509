"""The notebooks' preflight box: paste a launch command, see the rows and the verdict.

A ``Textarea`` for the command, a dropdown of the modelled engine versions and a *check* button
above an ``Output``. The command is read when the box loses focus or the button is pressed, not on
every keystroke: a check resolves the command and executes its failing steps, and a half-typed flag
is bad input, not something to check. Every check prints what ``workbench check`` prints. The plain
function underneath (``check_text``) is what the tests call, without a kernel.

Above the printed check, one line per row in the words and colours of the report and the atlas
(``workbench.present.words``: fails loudly, fails silently, fails past reach, safe), the verdict
first; the printed check below keeps its lines whole (it scrolls sideways rather than wrapping
mid-word).

A release's first check fetches its wheel (once per machine) and starts its engine process (a few
seconds): the box never waits for that on the kernel's main thread. Each change is checked on one
worker thread; when the answer is not there within ``PROMPT_S`` the box says at once what it is
doing and for which release (``data-state="pending"``), then draws the check when it comes. Only
the newest request runs: a dropdown walked quickly asks for many releases, and the ones passed over
are dropped, not queued.

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
from workbench.preflight import CheckResult, PreflightError, check, check_launches
from workbench.preflight.command import parse_commands
from workbench.preflight.format import format_launches_text, format_text
from workbench.preflight.rows import Row
from workbench.present.words import COLOURS, PAST_REACH, SAFE, TEXT_COLOURS, failure_word

NEWEST = "default (installed, else newest)"
PROMPT_S = 0.5  # an answer later than this is announced first (a person sees the click was taken)
HELP = ("<b>Preflight.</b> Paste a launch command (SGLang's <code>python -m sglang.launch_server ...</code> or "
        "<code>vllm serve ...</code>), pick the engine version it runs, then press <i>check</i> (leaving the box "
        "checks too). Try a <code>+revert-...</code> version to see the failure the fix removed.")


# The printed check keeps its columns: lines scroll sideways instead of wrapping mid-word.
NO_WRAP = ("<style>.workbench-preflight .jp-OutputArea-output pre { white-space: pre; overflow-x: auto; "
           "word-break: normal; }</style>")


def row_word(row: Row) -> str:
    """A preflight row's word, as the atlas says it: a failure a run reaches is loud or silent."""
    if row.reachable:
        return failure_word(row.outcome)
    return SAFE if row.first_failing is None else PAST_REACH


def rows_html(result: CheckResult) -> str:
    """The verdict and one line per row, each coloured by its word (the report's colours); a launch
    of a text holding several is named first."""
    lines = []
    for row in result.rows:
        word = row_word(row)
        where = f" at {row.first_failing:,} (a run reaches {row.reach:,})" if row.first_failing is not None and row.reach else ""
        lines.append(f'<li><span style="background:{COLOURS[word]};color:{TEXT_COLOURS[word]};padding:0 4px">'
                     f"{html.escape(word)}</span> {html.escape(row.buffer)} ({html.escape(row.backend)}), "
                     f"{html.escape(row.mode)}{html.escape(where)}</li>")
    which = f"launch {result.command.position}: " if result.command.launches > 1 else ""
    return f"<b>{which}{html.escape(result.verdict)}</b><ul style='margin:2px 0'>{''.join(lines)}</ul>"


def checked(command: str, engine: str = "") -> tuple[int, str, list[CheckResult]]:
    """(exit status, text, results) of a check, as ``workbench check`` gives them: one result per
    launch the engine read (a text may hold several, each checked); bad input is status 2 and its
    one line, never a traceback."""
    asked = engine.strip() or None
    try:
        if parse_commands(command)[0].launches > 1:
            every = check_launches(command, engine=asked, progress=None)
            return every.status, format_launches_text(every), [r for r in every.results if isinstance(r, CheckResult)]
        result: CheckResult = check(command, engine=asked, progress=None)
    except PreflightError as err:
        return 2, f"error: {err}", []
    return result.status, format_text(result), [result]


def check_text(command: str, engine: str = "") -> tuple[int, str]:
    """(exit status, text) of one check (``checked`` without the result)."""
    status, text, _ = checked(command, engine)
    return status, text


def pending_text(engine: str) -> str:
    """What the box shows while a check runs that is not immediate."""
    release = engine or "the default release"
    return (f"checking under {release} ... (a release's first check fetches its wheel, once per machine, "
            "and starts its engine process: seconds to a minute; the box redraws when it is done)")


def preflight_box(command: str, engine: str = "") -> Any:
    """The text box, the version dropdown and the printed check, redrawn on every change."""
    import ipywidgets as w  # type: ignore[import-untyped]

    versions = offered()
    if engine and engine not in versions:
        raise PreflightError(f"engine: {engine!r} is not a version a check can run (allowed: {', '.join(versions)})")
    text = w.Textarea(value=command, description="command", continuous_update=False,
                      layout=w.Layout(width="100%", height="90px"))
    version = w.Dropdown(options=[(NEWEST, "")] + [(v, v) for v in versions], value=engine, description="engine",
                         layout=w.Layout(width="420px"))
    button = w.Button(description="check", tooltip="check the command as it stands in the box")
    out = w.Output(layout=w.Layout(width="100%"))
    out.add_class("workbench-outcome")
    words = w.HTML()
    words.add_class("workbench-words")
    worker = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-preflight")
    lock = threading.Lock()
    state = {"asked": 0, "done": 0, "redraws": 0}

    def show(number: int, shown: str, listed: str, pending: bool) -> None:
        with lock:
            if number != state["asked"] or (pending and state["done"] == number):
                return  # a newer request is on its way, or this one's check drew first
            state["done"] = state["done"] if pending else number
            state["redraws"] += 1  # numbered, last, so a test knows the page shows this whole draw
            # Replace the output's stream directly: it redraws in a kernel and is readable without one
            out.outputs = ({"output_type": "stream", "name": "stdout", "text": shown + "\n"},)
            words.value = (f'<div data-redraw="{state["redraws"]}" data-state="{"pending" if pending else "done"}">'
                           f"{listed}</div>")

    def run(number: int, command: str, engine: str) -> None:
        if number != state["asked"]:
            return  # passed over by a later change
        try:
            status, shown, results = checked(command, engine)
        except Exception:  # a workbench bug: shown whole, never lost in the worker thread
            show(number, "internal error (a bug in the workbench; please report it):\n" + traceback.format_exc(),
                 "", pending=False)
            return
        # bad input has no rows: the printed line says why
        show(number, f"exit status {status}\n{shown}", "".join(rows_html(r) for r in results), pending=False)

    def redraw(_: object = None) -> None:
        with lock:
            state["asked"] += 1
            number = state["asked"]
        job = worker.submit(run, number, text.value, version.value)
        if not futures.wait([job], timeout=PROMPT_S).done:
            show(number, pending_text(version.value), f"<i>{html.escape(pending_text(version.value))}</i>", pending=True)

    text.observe(redraw, names="value")
    version.observe(redraw, names="value")
    button.on_click(redraw)
    state["asked"] = 1
    run(1, command, engine)  # the first draw in the cell itself: an executed notebook shows it
    box = w.VBox([w.HTML(HELP + NO_WRAP), text, w.HBox([version, button]), words, out])
    box.add_class("workbench-explorer")
    box.add_class("workbench-preflight")
    return box
