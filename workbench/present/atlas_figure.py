"""The atlas at a glance: one row per backend and engine version, one column per graph mode, each
cell coloured by what a real run meets: safe, a failure past what a run reaches, or a reachable one.

Rows rather than columns carry the versions: a version string such as
``sglang==0.5.14+dsa-width-w`` is wider than a cell, and tick labels side by side on an x axis
overlap once there are more than a handful of versions; stacked on the y axis they never do.
Takes ``workbench.analysis.atlas.summarize``'s frame; computes nothing but the labels.
"""

from __future__ import annotations

import re

import pandas as pd  # type: ignore[import-untyped]
import plotly.graph_objects as go  # type: ignore[import-untyped]

STATUS_LABELS = {"safe": "safe", "unreachable": "fails, unreachable", "reachable": "reachable failure"}
STATUS_COLOURS = {"safe": "#2ca02c", "unreachable": "#f2c14e", "reachable": "#d62728"}
MODE_ORDER = ("decode", "target-verify", "draft-decode", "draft-extend")
ROW_PX, COLUMN_PX = 62, 170  # a cell holds three lines of 11 px text; its column the widest outcome


def _version_key(engine: str) -> tuple[str, tuple[int, ...], str]:
    """'sglang==0.5.14+dsa-width-w' -> ('sglang', (0, 5, 14), '+dsa-width-w'): numeric release order,
    a pseudo-version right after the release it patches."""
    name, _, version = engine.partition("==")
    release, _, local = version.partition("+")
    return name, tuple(int(n) for n in re.findall(r"\d+", release)), local


def _cell_text(row: pd.Series) -> str:
    if row.status == "safe":
        return "safe"
    margin = int(row.margin)
    return f"{row.outcome}<br>at {int(row.first_failing_seq_len)}<br>margin {margin:+d}"


def atlas_figure(summary: pd.DataFrame) -> go.Figure:
    """One heatmap cell per (backend, engine version) x mode: the worst setting's status and first failing length."""
    rows = sorted({(b, e) for b, e in zip(summary.backend, summary.engine)}, key=lambda r: (r[0], _version_key(r[1])))
    modes = sorted(set(summary["mode"]), key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else len(MODE_ORDER), m))
    codes = {s: i for i, s in enumerate(STATUS_LABELS)}
    z: list[list[float | None]] = [[None] * len(modes) for _ in rows]
    # A mode the backend has under some version but not this one: the version's data do not say
    # (not read, or not modelled there), which is not the same as a backend without the graph.
    elsewhere = set(zip(summary.backend, summary["mode"]))
    text: list[list[str]] = [["not modelled" if (backend, mode) in elsewhere else "no such graph" for mode in modes]
                             for backend, _ in rows]
    for _, row in summary.iterrows():
        i, j = rows.index((row.backend, row.engine)), modes.index(row["mode"])
        z[i][j] = codes[row.status]
        text[i][j] = _cell_text(row)
    n = len(STATUS_LABELS)
    scale = []
    for k, status in enumerate(STATUS_LABELS):  # a discrete scale: one flat band per status
        scale += [[k / n, STATUS_COLOURS[status]], [(k + 1) / n, STATUS_COLOURS[status]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(modes), y=[f"{backend}<br>{engine}" for backend, engine in rows], text=text,
        texttemplate="%{text}", textfont={"size": 11}, colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=3, ygap=3,
        colorbar={"title": {"text": "what a run meets"}, "len": 240, "lenmode": "pixels", "y": 1, "yanchor": "top",
                  "tickvals": list(range(n)),
                  "ticktext": list(STATUS_LABELS.values())},
        hovertemplate="%{y}<br>%{x}<br>%{text}<extra></extra>",
    ))
    fig.update_layout(
        title="Atlas: can a real run fail? (worst setting per backend, engine version and mode)",
        xaxis={"title": "graph mode", "side": "top"},
        yaxis={"title": "backend (graph-captured table) and engine version", "autorange": "reversed", "automargin": True},
        height=200 + ROW_PX * len(rows), width=max(760, COLUMN_PX * len(modes) + 460),
        margin={"l": 40, "t": 130, "b": 40},
    )
    return fig
