"""The notebooks' preflight box: paste a launch command, see the rows and the verdict.

An ipywidgets ``Textarea`` for the command (and one for the engine version) above an ``Output``;
every change runs ``workbench.preflight.check`` and prints what ``workbench check`` prints. The
plain function underneath (``check_text``) is what the tests call, without a kernel.
"""

from __future__ import annotations

from typing import Any

from workbench.preflight import CheckResult, PreflightError, check
from workbench.preflight.format import format_text


def check_text(command: str, engine: str = "") -> tuple[int, str]:
    """(exit status, text) of one check, as ``workbench check`` gives them; bad input is status 2
    and its one line, never a traceback."""
    try:
        result: CheckResult = check(command, engine=engine.strip() or None)
    except PreflightError as err:
        return 2, f"error: {err}"
    return result.status, format_text(result)


def preflight_box(command: str, engine: str = "") -> Any:
    """The text box and its output, drawn once and redrawn on every change."""
    import ipywidgets as w  # type: ignore[import-untyped]

    text = w.Textarea(value=command, description="command", layout=w.Layout(width="100%", height="90px"))
    version = w.Text(value=engine, description="engine", placeholder="newest modelled (e.g. sglang==0.5.23)")
    out = w.Output(layout=w.Layout(width="100%"))

    def redraw(_: object = None) -> None:
        status, shown = check_text(text.value, version.value)
        # Replace the output's stream directly: it redraws in a kernel and is readable without one
        out.outputs = ({"output_type": "stream", "name": "stdout", "text": f"exit status {status}\n{shown}\n"},)

    text.observe(redraw, names="value")
    version.observe(redraw, names="value")
    redraw()
    return w.VBox([text, version, out])
