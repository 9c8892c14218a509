"""One redraw mechanism for every explorer: controls, an outcome line and a figure updated in place.

A notebook explorer is a ``LivePanel``: a dict of ipywidgets controls, a ``draw`` function from
their values to a ``Drawn`` (the outcome line, whether it failed, a plotly figure) and a box that
shows them. The figure is a ``plotly.graph_objects.FigureWidget`` made once; every redraw replaces
its traces and layout in place, so the figure in the explorer's own output changes (a plotly
figure handed to ``Output.append_display_data`` is displayed in JupyterLab's log console instead),
plotly.js is not sent again, and a zoom survives while ``uirevision`` stays the same.

Outside a kernel (tests, scripts) the same objects work: the widgets hold their state in Python.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FAILED_COLOUR = "#b00020"
OK_COLOUR = "#1b5e20"
FIGURE_HEIGHT = 470


@dataclass(frozen=True)
class Drawn:
    """What one redraw shows: the outcome line, its colour, the figure (None: nothing to draw)."""

    summary: str
    failed: bool
    figure: Any  # plotly.graph_objects.Figure | None
    uirevision: str = ""  # a zoom is kept while this stays the same (e.g. the same context length)


def error_line(err: BaseException) -> str:
    """An explorer's failure as the one line it shows under its controls."""
    message = " ".join(str(err).split()) or "no message"
    return f"error: {type(err).__name__}: {message}"


def _empty_figure(reason: str) -> Any:
    import plotly.graph_objects as go  # type: ignore[import-untyped]

    fig = go.Figure()
    fig.update_layout(title=f"no figure: {reason}", xaxis={"visible": False}, yaxis={"visible": False})
    return fig


class LiveFigure:
    """A FigureWidget that takes each new figure's traces and layout in place."""

    def __init__(self) -> None:
        import plotly.graph_objects as go

        # Validation already happened when the plot functions built the figure; skip it on each update.
        self.widget = go.FigureWidget(layout={"height": FIGURE_HEIGHT}, _validate=False)
        self._sent: list[Any] = []  # each shown trace as last sent (plotly JSON), to skip unchanged ones
        self._template: Any = None

    def show(self, figure: Any, uirevision: str = "", redraw: int = 0) -> None:
        """Take ``figure``'s traces and layout. When its traces match the shown ones in number and
        type (the plots keep them constant, empty where there is nothing to draw), every change goes
        to the page as one batched update (one redraw); otherwise the traces are replaced."""
        import plotly.io as pio  # type: ignore[import-untyped]

        layout = figure.layout.to_plotly_json()
        layout.setdefault("height", FIGURE_HEIGHT)
        layout["uirevision"] = uirevision or None
        layout["meta"] = {**(layout.get("meta") or {}), "redraw": redraw}  # which redraw the page shows
        new = list(figure.data)
        sent = [pio.to_json(trace.to_plotly_json(), validate=False) for trace in new]
        same = len(new) == len(self.widget.data) and all(a.type == b.type for a, b in zip(self.widget.data, new))
        if not same:
            with self.widget.batch_update():
                self.widget.data = ()
                self.widget.add_traces(new)
                self.widget.layout = layout
            self._sent, self._template = sent, layout.get("template")
            return
        # Most of an update's time is plotly rebuilding objects it already holds: a trace whose JSON
        # did not change, and the template (the same in every figure of the plots), are not sent again.
        if layout.get("template") == self._template:
            layout.pop("template", None)
        else:
            self._template = layout.get("template")
        with self.widget.batch_update():
            for shown, trace, now, before in zip(self.widget.data, new, sent, self._sent):
                if now != before:
                    shown.update(trace.to_plotly_json(), overwrite=True)
            self.widget.update_layout(layout, overwrite=True)
        self._sent = sent


class LivePanel:
    """Controls -> ``draw(values)`` -> outcome line and figure; redrawn on every control change.

    ``rows`` lays the controls out (names per row, of ``controls`` or of ``shortcuts``: widgets shown
    but not read, such as a preset slider that writes into a control); ``help_text`` is one line of
    HTML above them saying what the controls mean and what to try. CSS classes ``workbench-explorer`` (the box),
    ``workbench-outcome`` (the line) and ``workbench-figure`` (the figure) let a browser test find them;
    each redraw is numbered in both (the line's ``data-redraw``, the figure's ``layout.meta.redraw``),
    so a test knows when the page shows a redraw whole, even one that changes nothing visible.
    """

    def __init__(self, controls: Mapping[str, Any], rows: Sequence[Sequence[str]], draw: Callable[[dict[str, Any]], Drawn],
                 help_text: str = "", shortcuts: Mapping[str, Any] | None = None) -> None:
        import ipywidgets as w  # type: ignore[import-untyped]

        self.controls = dict(controls)
        self.draw = draw
        self.outcome = w.HTML()
        self.outcome.add_class("workbench-outcome")
        self.figure = LiveFigure()
        self.figure.widget.add_class("workbench-figure")
        self.drawn: Drawn | None = None
        self.redraws = 0  # shown in the line (``data-redraw``) and the figure (``layout.meta.redraw``)
        parts: list[Any] = [w.HTML(help_text)] if help_text else []
        shown = {**(shortcuts or {}), **self.controls}
        parts += [w.HBox([shown[name] for name in row]) for row in rows]
        self.widget = w.VBox([*parts, self.outcome, self.figure.widget])
        self.widget.add_class("workbench-explorer")
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.redraw()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def _changed(self, _change: object) -> None:
        self.redraw()

    def redraw(self) -> Drawn:
        try:
            drawn = self.draw(self.values())
        except Exception as err:  # shown in the explorer itself, never only in JupyterLab's log console
            drawn = Drawn(error_line(err), True, None)
        colour = FAILED_COLOUR if drawn.failed else OK_COLOUR
        self.redraws += 1
        self.outcome.value = f'<b style="color:{colour}" data-redraw="{self.redraws}">{html.escape(drawn.summary)}</b>'
        figure = drawn.figure if drawn.figure is not None else _empty_figure(drawn.summary)
        self.figure.show(figure, drawn.uirevision, self.redraws)
        self.drawn = drawn
        return drawn


def length_control(value: int, low: int, high: int, presets: Mapping[str, int], description: str) -> tuple[Any, Any]:
    """A typed length (``BoundedIntText``: any integer, applied on Enter) and a slider of presets
    that writes into it. Only the text box is a control of the state; the slider is a shortcut."""
    import ipywidgets as w

    labels = {value: f"{value:,}"} | {v: label for label, v in presets.items() if low <= v <= high}
    options = [(labels[v], v) for v in sorted(labels)]
    text = w.BoundedIntText(value=value, min=low, max=high, description=description, continuous_update=False,
                            tooltip=f"type any length from {low:,} to {high:,} and press Enter")
    slider = w.SelectionSlider(options=options, value=value, description="presets", continuous_update=False)

    def preset_chosen(change: Mapping[str, Any]) -> None:
        text.value = change["new"]

    slider.observe(preset_chosen, names="value")
    return text, slider
