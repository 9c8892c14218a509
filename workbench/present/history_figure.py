"""The history of the bug class as a timeline: one line per backend and mode, releases left to
right, each run of consecutive releases that meet the same drawn as one bar coloured by what a
run of the reference deployment meets, with its first failing committed length written in it.

A fix shows as a change of colour (or of the number) between two releases; the releases to avoid
are the red (loud) and orange (silent) bars; a slate bar is a release whose own start-up checks
refuse the deployment (the hover gives the engine's message), distinct from a grey "n/a" one whose
buffer is not modelled, absent or not learned (its bar says which). Words and colours are
``workbench.present.words``'s, as in every other view; backends by their registry names. Takes
``workbench.atlas.history.history``'s frame; computes nothing but runs and labels.
"""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
import plotly.graph_objects as go  # type: ignore[import-untyped]

from workbench.present.atlas_figure import wrap
from workbench.present.words import COLOURS, NOT_APPLICABLE, REFUSED, WORDS, legend_name, status_word

# A status with nothing run (``history.NO_RESULT`` but refused) is "n/a" in the legend; the bar says why.
NO_RESULT_WHY = {"not modelled": "not modelled (no rule agrees, or its code did not run)", "absent": "no such buffer",
                 "not learned": "not learned"}


def status_word_of(status: str, outcome: object) -> str:
    """A history cell's word (``words``): a reachable failure loud or silent, past reach, safe, refused
    at start-up, or n/a for a release with nothing run there (``NO_RESULT_WHY``)."""
    if status in NO_RESULT_WHY:
        return NOT_APPLICABLE
    return status_word(status, str(outcome))


ROW_PX, COLUMN_PX = 26, 22
TEXT_MIN_RUN = 3  # releases a bar spans before its number is written in it (a narrower one: hover)


def _runs(rows: pd.DataFrame) -> list[tuple[int, int, pd.Series]]:
    """(first index, last index, the row) of each run of releases whose cells are the same."""
    keys = ("status", "outcome", "first_failing", "startup_refusal")
    runs: list[tuple[int, int, pd.Series]] = []
    for i, (_, row) in enumerate(rows.iterrows()):
        same = runs and all(str(runs[-1][2].get(k)) == str(row.get(k)) for k in keys)
        if same:
            runs[-1] = (runs[-1][0], i, runs[-1][2])
        else:
            runs.append((i, i, row))
    return runs


def _label(row: pd.Series) -> str:
    if row.status in ("reachable", "unreachable") and pd.notna(row.get("first_failing")):
        return f"{int(row.first_failing)}"
    if row.status in ("reachable", "unreachable"):
        return str(row.outcome)
    return str(row.status) if row.status in NO_RESULT_WHY else ""


def _detail(row: pd.Series) -> str:
    """The hover's account of a run of releases: the failure, the outcome, or the engine's refusal."""
    if row.status == "refused":
        return f"{REFUSED}: {wrap(str(row.startup_refusal))}"
    if row.status in NO_RESULT_WHY:
        return NO_RESULT_WHY[str(row.status)]
    if pd.notna(row.get("first_failing")):
        return f"{row.outcome} at {int(row.first_failing)}"
    outcome = row.get("outcome")
    return str(outcome) if isinstance(outcome, str) else str(row.status)


def history_figure(frame: pd.DataFrame) -> go.Figure:
    releases = list(dict.fromkeys(frame.release))
    lines = list(dict.fromkeys(zip(frame.backend, frame["mode"])))
    fig = go.Figure()
    bars: list[tuple[str, go.Bar]] = []
    for y, (backend, mode) in enumerate(lines):
        rows = frame[(frame.backend == backend) & (frame["mode"] == mode)]
        for first, last, row in _runs(rows):
            word = status_word_of(str(row.status), row.get("outcome"))
            span = f"{releases[first].split('==')[1]}-{releases[last].split('==')[1]}" if last > first else \
                releases[first].split("==")[1]
            bars.append((word, go.Bar(
                x=[last - first + 1], base=[first - 0.5], y=[y], orientation="h", width=0.8,
                marker={"color": COLOURS[word], "line": {"color": "#555", "width": 0.5}},
                name=legend_name(word), legendgroup=word,
                text=[_label(row) if last - first + 1 >= TEXT_MIN_RUN else ""], textposition="inside",
                insidetextanchor="middle", textfont={"size": 10}, cliponaxis=True,
                hovertext=[f"{backend} {mode}<br>{row.reference}<br>{span}: {_detail(row)} ({word})"],
                hoverinfo="text")))
    shown: set[str] = set()
    for word, bar in sorted(bars, key=lambda item: WORDS.index(item[0])):  # the legend in the words' order
        bar.showlegend = word not in shown
        shown.add(word)
        fig.add_trace(bar)
    fig.update_layout(
        title={"text": "History: what a reference deployment meets, release by release (first failing committed length)",
               "x": 0.01, "xanchor": "left"},
        barmode="overlay", bargap=0.2, plot_bgcolor="white",
        xaxis={"title": "release", "tickmode": "array", "tickvals": list(range(len(releases))),
               "ticktext": [r.split("==")[1] for r in releases], "tickangle": -90, "range": [-0.5, len(releases) - 0.5],
               "tickfont": {"size": 10}},
        yaxis={"title": "backend and graph mode (buffer)", "tickmode": "array", "tickvals": list(range(len(lines))),
               "ticktext": [f"{b} · {m}" for b, m in lines], "autorange": "reversed",
               "automargin": True, "tickfont": {"size": 10}},
        legend={"orientation": "h", "y": -0.12, "x": 0, "yanchor": "top", "title": {"text": "what a run meets: "}},
        height=260 + ROW_PX * len(lines), width=max(1100, 420 + COLUMN_PX * len(releases)),
        margin={"l": 40, "t": 70, "b": 160},
    )
    return fig
