"""The notebooks' preflight box: paste a launch command, see the rows and the verdict.

A ``Textarea`` for the command, a dropdown of the modelled engine versions and a *check* button
above an ``Output``. The command is read when the box loses focus or the button is pressed, not on
every keystroke: a check resolves the command and executes its failing steps, and a half-typed flag
is bad input, not something to check. Every check prints what ``workbench check`` prints. The plain
function underneath (``check_text``) is what the tests call, without a kernel.

The CSS classes ``workbench-explorer`` (the box) and ``workbench-outcome`` (the printed check) are
the explorers' own, so the JupyterLab browser test finds this box the way it finds them.
"""

from __future__ import annotations

from typing import Any

from workbench.engines.release_choice import offered
from workbench.preflight import CheckResult, PreflightError, check
from workbench.preflight.format import format_text

NEWEST = "default (installed, else newest)"
HELP = ("<b>Preflight.</b> Paste a launch command (SGLang's <code>python -m sglang.launch_server ...</code> or "
        "<code>vllm serve ...</code>), pick the engine version it runs, then press <i>check</i> (leaving the box "
        "checks too). Try a <code>+revert-...</code> version to see the failure the fix removed.")


def check_text(command: str, engine: str = "") -> tuple[int, str]:
    """(exit status, text) of one check, as ``workbench check`` gives them; bad input is status 2
    and its one line, never a traceback."""
    try:
        result: CheckResult = check(command, engine=engine.strip() or None, progress=None)
    except PreflightError as err:
        return 2, f"error: {err}"
    return result.status, format_text(result)


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

    def redraw(_: object = None) -> None:
        status, shown = check_text(text.value, version.value)
        # Replace the output's stream directly: it redraws in a kernel and is readable without one
        out.outputs = ({"output_type": "stream", "name": "stdout", "text": f"exit status {status}\n{shown}\n"},)

    text.observe(redraw, names="value")
    version.observe(redraw, names="value")
    button.on_click(redraw)
    redraw()
    box = w.VBox([w.HTML(HELP), text, w.HBox([version, button]), out])
    box.add_class("workbench-explorer")
    return box
