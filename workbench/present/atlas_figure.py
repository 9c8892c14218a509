"""The atlas at a glance: one row per backend and engine release, one column per graph mode, each
cell coloured by what a real run meets, in the words of ``workbench.present.words``: safe, fails
past reach (a margin), fails loudly or fails silently (a run reaches it), or refused at start-up
(the release's own start-up checks refuse every setting there: no run starts; the hover gives the
engine's message). A cell with no row says why: the backend has no such graph, or the release's data
give it none (not modelled).

Rows rather than columns carry the releases: a version string is wider than a cell, and stacked on
the y axis they never overlap. Consecutive releases of a backend whose cells are all the same share
one row (``0.5.14, 0.5.18, 0.5.23``), so the figure grows with what changes, not with the number of
releases. It is drawn to fit JupyterLab's default notebook width (``MAX_WIDTH``). Takes
``workbench.atlas.rows.summarize``'s frame; computes nothing but the labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd  # type: ignore[import-untyped]
import plotly.graph_objects as go  # type: ignore[import-untyped]

from workbench.atlas.findings import release_key
from workbench.present.words import COLOURS, LOUD, NOT_APPLICABLE, PAST_REACH, REFUSED, SAFE, SILENT, status_word

CELL_WORDS = (SAFE, PAST_REACH, LOUD, SILENT, REFUSED, NOT_APPLICABLE)  # the colour bar's order
MODE_ORDER = ("decode", "target-verify", "draft-decode", "draft-extend", "draft-decode-eager")
ROW_PX, COLUMN_PX, LABEL_PX = 44, 118, 300  # a cell holds three lines of 10 px text
TOP_PX = 160  # the title, the colour bar and the graph modes above the cells
MAX_WIDTH = 940  # JupyterLab 4's output area at a 1400 px window with its file browser open
MAX_VERSIONS_NAMED = 3  # a shared row names up to this many releases, else its first and last
NO_GRAPH, NOT_MODELLED = "no such graph", "not modelled"
HOVER_WRAP = 72  # characters a hover line holds before an engine's message wraps


def two_lines(word: str) -> str:
    """A word of several parts in two lines, broken at the space nearest its middle (``fails past
    reach`` -> ``fails past<br>reach``): a colour bar band or a cell is narrower than the word in one."""
    spaces = [i for i, c in enumerate(word) if c == " "]
    if not spaces:
        return word
    cut = min(spaces, key=lambda i: abs(len(word) / 2 - i))
    return word[:cut] + "<br>" + word[cut + 1:]


REFUSED_TEXT = two_lines(REFUSED)

Cell = tuple[str, str, str]  # (word, the cell's text, its hover text)


def _cell_text(row: pd.Series) -> str:
    """The cell's word (two lines for a long one), then the first failing length and the margin:
    a cell past reach reads as such, never as the error a run would meet there."""
    word = status_word(row.status, row.outcome)
    if row.status in ("refused", "safe"):
        return two_lines(word)
    return f"{word}<br>s {int(row.first_failing_seq_len):,}<br>margin {int(row.margin):+,}"


def wrap(text: str) -> str:
    """``text`` broken into hover lines of at most ``HOVER_WRAP`` characters, at spaces."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= HOVER_WRAP:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _hover(row: pd.Series) -> str:
    """The cell's word and numbers with the step's outcome; for a refused cell, what was refused and
    each of the engine's messages."""
    if row.status != "refused":
        text = _cell_text(row).replace("<br>", ", ")
        return text if row.status == "safe" else f"{text}<br>outcome there: {row.outcome}"
    said = "<br>".join(f"- {wrap(line)}" for line in str(row.startup_refusal).splitlines())
    count = row.get("settings_refused")
    every = f"all {int(count)} settings" if count is not None and pd.notna(count) else "every setting"
    return (f"{REFUSED}: the release's own checks refuse {every} here<br>"
            f"(e.g. {row.preset} {row.recipe} ctx {int(row.context_len)} ps {int(row.page_size)}):<br>{said}")


def _cells(summary: pd.DataFrame, modes: Sequence[str]) -> dict[tuple[str, str], list[Cell]]:
    """(backend, engine) -> per mode (word, text, hover); modes a backend lacks say why."""
    elsewhere = set(zip(summary.backend, summary["mode"]))
    cells: dict[tuple[str, str], list[Cell]] = {}
    for backend, engine in zip(summary.backend, summary.engine):
        why = [NOT_MODELLED if (backend, m) in elsewhere else NO_GRAPH for m in modes]
        cells[(backend, engine)] = [(NOT_APPLICABLE, text, text) for text in why]
    for _, row in summary.iterrows():
        cells[(row.backend, row.engine)][modes.index(row["mode"])] = (status_word(row.status, row.outcome),
                                                                       _cell_text(row), _hover(row))
    return cells


def _version(engine: str) -> str:
    return engine.partition("==")[2] or engine


def _label(backend: str, engines: Sequence[str]) -> str:
    name = engines[0].partition("==")[0]
    versions = [_version(e) for e in engines]
    if len(versions) > MAX_VERSIONS_NAMED:
        shown = f"{versions[0]} to {versions[-1]} ({len(versions)} releases)"
    else:
        shown = ", ".join(versions)
    return f"{backend}<br>{name} {shown}" if name != engines[0] else f"{backend}<br>{name}"


def atlas_rows(summary: pd.DataFrame, modes: Sequence[str]) -> list[tuple[str, list[Cell]]]:
    """(label, cells) per figure row: each backend's releases in order, consecutive releases with the
    same cells in every mode joined into one row."""
    cells = _cells(summary, modes)
    rows: list[tuple[str, list[Cell]]] = []
    for backend in sorted({b for b, _ in cells}):
        engines = sorted((e for b, e in cells if b == backend), key=release_key)
        run: list[str] = []
        for engine in engines + [""]:
            same_engine = bool(run) and engine.partition("==")[0] == run[0].partition("==")[0]
            if run and (not engine or not same_engine or cells[(backend, engine)] != cells[(backend, run[0])]):
                rows.append((_label(backend, run), cells[(backend, run[0])]))
                run = []
            if engine:
                run.append(engine)
    return rows


def atlas_figure(summary: pd.DataFrame) -> go.Figure:
    """One heatmap cell per (backend, engine releases) x mode: the worst setting's word, outcome,
    first failing committed length and margin."""
    modes = sorted(set(summary["mode"]), key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER), m))
    rows = atlas_rows(summary, modes)
    codes = {word: i for i, word in enumerate(CELL_WORDS)}
    n = len(CELL_WORDS)
    scale = []
    for k, word in enumerate(CELL_WORDS):  # a discrete scale: one flat band per word
        scale += [[k / n, COLOURS[word]], [(k + 1) / n, COLOURS[word]]]
    height = TOP_PX + ROW_PX * len(rows) + 20
    fig = go.Figure(go.Heatmap(
        z=[[codes[word] for word, _, _ in cells] for _, cells in rows], x=list(modes), y=[label for label, _ in rows],
        text=[[text for _, text, _ in cells] for _, cells in rows], texttemplate="%{text}", textfont={"size": 10},
        customdata=[[hover for _, _, hover in cells] for _, cells in rows],
        colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=3, ygap=3,
        # across the top, under the title (container coordinates, in pixels from the top)
        colorbar={"title": {"text": "what a run meets", "side": "right"}, "orientation": "h", "x": 0, "xanchor": "left",
                  "y": 1 - 42 / height, "yanchor": "top", "yref": "container", "len": 0.9, "thickness": 14, "tickangle": 0,
                  "tickvals": list(range(n)), "ticktext": [two_lines(word) for word in CELL_WORDS],
                  "tickfont": {"size": 11}},
        hovertemplate="%{y}<br>%{x}<br>%{customdata}<extra></extra>",
    ))
    width = min(MAX_WIDTH, LABEL_PX + COLUMN_PX * len(modes) + 40)
    fig.update_layout(
        title={"text": "Atlas: can a real run fail? (worst setting per backend, releases and graph mode)", "x": 0.01,
               "y": 1 - 12 / height, "yanchor": "top", "yref": "container"},
        xaxis={"title": {"text": "graph mode"}, "side": "top", "tickfont": {"size": 11}},
        yaxis={"title": {"text": "backend and engine releases"}, "autorange": "reversed", "automargin": True,
               "tickfont": {"size": 10}},
        height=height, width=width, font={"family": "DejaVu Sans, Arial, sans-serif", "size": 12},
        margin={"l": 20, "r": 20, "t": TOP_PX, "b": 20},
    )
    return fig


def atlas_caption(summary: pd.DataFrame) -> str:
    """What to see in the figure, every number from the summary: how many rows a run breaks (loud,
    silent), the range of margins of the rows that fail only past reach, and the rows the release
    refuses at start-up."""
    words = [status_word(s, o) for s, o in zip(summary.status, summary.outcome)]
    count = {word: words.count(word) for word in (SAFE, PAST_REACH, LOUD, SILENT, REFUSED)}
    past = summary[summary.status == "unreachable"]
    margins = f" (margins {int(past.margin.min()):+,} to {int(past.margin.max()):+,} tokens)" if not past.empty else ""
    return (f"One row per backend and releases, one column per graph mode; of {len(summary)} backend, release and mode "
            f"rows, {count[LOUD]} {LOUD} and {count[SILENT]} {SILENT} in a real run (red, orange), {count[PAST_REACH]} "
            f"{PAST_REACH}{margins} (blue), {count[SAFE]} are {SAFE} at every committed length the table holds (green)"
            + (f", {count[REFUSED]} {REFUSED} (slate: the release's own checks refuse every setting)" if count[REFUSED] else "")
            + ".")
