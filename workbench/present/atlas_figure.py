"""The atlas at a glance: backends (rows) by engine version and mode (columns), one cell each,
coloured by what a real run meets: safe, a failure past what a run reaches, or a reachable one.

Takes ``workbench.analysis.atlas.summarize``'s frame; computes nothing but the labels.
"""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]
import plotly.graph_objects as go  # type: ignore[import-untyped]

STATUS_LABELS = {"safe": "safe", "unreachable": "fails, unreachable", "reachable": "reachable failure"}
STATUS_COLOURS = {"safe": "#2ca02c", "unreachable": "#f2c14e", "reachable": "#d62728"}
MODE_ORDER = ("decode", "target-verify", "draft-decode", "draft-extend")


def _cell_text(row: pd.Series) -> str:
    if row.status == "safe":
        return "safe"
    margin = int(row.margin)
    return f"{row.outcome}<br>at {int(row.first_failing_seq_len)}<br>margin {margin:+d}"


def atlas_figure(summary: pd.DataFrame) -> go.Figure:
    """One heatmap cell per backend x (engine, mode); the worst setting's status and first failing length."""
    columns = sorted({(e, m) for e, m in zip(summary.engine, summary["mode"])},
                     key=lambda c: (c[0], MODE_ORDER.index(c[1]) if c[1] in MODE_ORDER else 99))
    rows = sorted(summary.backend.unique())
    codes = {s: i for i, s in enumerate(STATUS_LABELS)}
    z: list[list[float | None]] = [[None] * len(columns) for _ in rows]
    text: list[list[str]] = [["no such graph"] * len(columns) for _ in rows]
    for _, row in summary.iterrows():
        i, j = rows.index(row.backend), columns.index((row.engine, row["mode"]))
        z[i][j] = codes[row.status]
        text[i][j] = _cell_text(row)
    n = len(STATUS_LABELS)
    scale = []
    for k, status in enumerate(STATUS_LABELS):  # a discrete scale: one flat band per status
        scale += [[k / n, STATUS_COLOURS[status]], [(k + 1) / n, STATUS_COLOURS[status]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"{e}<br>{m}" for e, m in columns], y=rows, text=text, texttemplate="%{text}",
        textfont={"size": 11}, colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=3, ygap=3,
        colorbar={"title": {"text": "what a run meets"}, "tickvals": list(range(n)),
                  "ticktext": list(STATUS_LABELS.values())},
        hovertemplate="%{y}<br>%{x}<br>%{text}<extra></extra>",
    ))
    fig.update_layout(
        title="Atlas: can a real run fail? (worst setting per backend, engine version and mode)",
        xaxis_title="engine version and graph mode", yaxis_title="backend (graph-captured table)",
        height=180 + 90 * len(rows), width=max(760, 150 * len(columns) + 320), margin={"l": 200, "b": 110},
    )
    return fig
