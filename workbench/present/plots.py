"""DataFrame in, plotly Figure out. Plots group and label; they compute nothing.

Each function takes a frame made by ``workbench.analysis.sweep`` or ``workbench.analysis.memory`` and returns a
figure with a title, axis titles and a legend (or colour bar) that say what is drawn.
"""

from __future__ import annotations

from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import plotly.express as px  # type: ignore[import-untyped]
import plotly.graph_objects as go  # type: ignore[import-untyped]
from plotly.subplots import make_subplots  # type: ignore[import-untyped]

OUTCOME_COLOURS = {
    "ok": "#2ca02c", "out-of-memory": "#7f7f7f", "shape-error": "#d62728", "index-error": "#9467bd",
    "silent-overread": "#ff7f0e", "silent-overwrite": "#8c564b", "invalid": "#bcbd22",
}


def _sorted_values(frame: pd.DataFrame, column: str) -> list[Any]:
    return sorted(frame[column].unique().tolist())


def _row_label(row: pd.Series, parts: list[str]) -> str:
    names = {"component": "", "rule": "", "draft_tokens": "D=", "replay": "", "width_gen": ""}
    return " · ".join(f"{names.get(p, p + '=')}{row[p]}" for p in parts)


def failure_map(frame: pd.DataFrame) -> go.Figure:
    """Heatmaps of ``failing_offset`` (first failing committed length minus ctx) over context length
    (x) and rule x draft tokens (y); one panel per page size (columns) and mode (rows).

    A blank cell never fails up to ``ctx - 1 + overshoot``. Component, replay and width generation
    join the row label when the frame holds more than one of them.
    """
    modes = _sorted_values(frame, "mode")
    page_sizes = _sorted_values(frame, "page_size")
    parts = [p for p in ("component", "replay", "width_gen") if frame[p].nunique() > 1] + ["rule", "draft_tokens"]
    labelled = frame.assign(config=frame.apply(_row_label, axis=1, parts=parts), ctx=frame["context_len"].astype(str))
    fig = make_subplots(
        rows=len(modes), cols=len(page_sizes), shared_xaxes=True, shared_yaxes=True,
        row_titles=[f"mode={m}" for m in modes], column_titles=[f"page_size={p}" for p in page_sizes],
        horizontal_spacing=0.03, vertical_spacing=0.06,
    )
    order = sorted(labelled["config"].unique())
    for r, mode in enumerate(modes, start=1):
        for c, ps in enumerate(page_sizes, start=1):
            panel = labelled[(labelled["mode"] == mode) & (labelled["page_size"] == ps)]
            if panel.empty:
                continue
            grid = panel.pivot_table(index="config", columns="ctx", values="failing_offset", aggfunc="first", dropna=False)
            columns = [str(x) for x in _sorted_values(panel, "context_len")]
            grid = grid.reindex(index=[o for o in order if o in grid.index], columns=columns)
            fig.add_trace(go.Heatmap(
                z=grid.to_numpy(dtype=float, na_value=float("nan")), x=list(grid.columns), y=list(grid.index),
                coloraxis="coloraxis", name=f"{mode}, ps={ps}",
                hovertemplate="ctx %{x}<br>%{y}<br>first failing s - ctx = %{z}<extra></extra>",
            ), row=r, col=c)
    fig.update_layout(
        title="Where each sizing rule first fails: first failing committed length minus context length (blank: never fails)",
        coloraxis={"colorscale": "RdBu", "cmid": 0, "colorbar": {"title": "first failing s − ctx"}},
        height=max(350, 260 * len(modes)),
    )
    fig.update_xaxes(title_text="context length (tokens)", type="category", row=len(modes))
    fig.update_yaxes(title_text="rule · draft tokens", col=1)
    return fig


def memory_overhead(frame: pd.DataFrame) -> go.Figure:
    """Buffer bytes against context length, one colour per rule, dash per component; one line per
    draft-token count; panels per page size (columns) and mode (rows); log axes."""
    unique = frame.drop_duplicates(["component", "rule", "mode", "page_size", "draft_tokens", "context_len"])
    fig = px.line(
        unique.sort_values("context_len"), x="context_len", y="buffer_bytes", color="rule", line_dash="component",
        line_group="draft_tokens", facet_col="page_size", facet_row="mode", log_x=True, log_y=True, markers=True,
        hover_data=["draft_tokens", "buffer_width", "buffer_unit", "min_safe_bytes", "overhead_bytes"],
        labels={"context_len": "context length (tokens)", "buffer_bytes": "graph buffer bytes", "rule": "sizing rule"},
        title="Graph-buffer bytes per sizing rule (max_bs rows, int32)",
    )
    fig.update_layout(legend_title_text="sizing rule, component")
    return fig


def kv_budget_share(memory_frame: pd.DataFrame) -> go.Figure:
    """Each preset's graph-buffer bytes as a share of its KV budget, per rule and component."""
    fig = px.bar(
        memory_frame, x="preset", y="share_of_kv_budget", color="rule", facet_col="component", barmode="group",
        log_y=True, hover_data=["bytes", "min_safe_bytes", "overhead_bytes", "kv_budget_bytes"],
        labels={"preset": "model preset", "share_of_kv_budget": "share of the KV budget", "rule": "sizing rule"},
        title="Graph-buffer bytes as a share of the KV cache of max_bs full-context requests",
    )
    fig.update_layout(legend_title_text="sizing rule")
    return fig


def exact_fit_map(alloc_frame: pd.DataFrame) -> go.Figure:
    """Free pages (y) for each batch (x), coloured by outcome; black dashes mark the pages the
    batch needs (the exact fit). Panels per gather (columns) and page size (rows)."""
    gathers = list(dict.fromkeys(alloc_frame["gather"]))
    page_sizes = _sorted_values(alloc_frame, "page_size")
    fig = make_subplots(
        rows=len(page_sizes), cols=len(gathers), shared_yaxes=True, shared_xaxes=True,
        column_titles=[f"gather={g}" for g in gathers], row_titles=[f"page_size={p}" for p in page_sizes],
        horizontal_spacing=0.03,
    )
    shown: set[str] = set()
    for r, ps in enumerate(page_sizes, start=1):
        for c, gather in enumerate(gathers, start=1):
            panel = alloc_frame[(alloc_frame["gather"] == gather) & (alloc_frame["page_size"] == ps)]
            for outcome, group in panel.groupby("outcome", sort=True):
                fig.add_trace(go.Scatter(
                    x=group["batch"], y=group["free_pages"], mode="markers", name=outcome, legendgroup=outcome,
                    showlegend=outcome not in shown, marker={"color": OUTCOME_COLOURS.get(outcome), "size": 9},
                    customdata=group[["pattern", "pages_needed"]], text=group["error"],
                    hovertemplate="%{x} (%{customdata[0]})<br>free %{y}, needed %{customdata[1]}<br>%{text}<extra></extra>",
                ), row=r, col=c)
                shown.add(outcome)
            needed = panel.drop_duplicates("batch")
            fig.add_trace(go.Scatter(
                x=needed["batch"], y=needed["pages_needed"], mode="markers", name="pages needed (exact fit)",
                legendgroup="needed", showlegend=(r, c) == (1, 1),
                marker={"symbol": "line-ew-open", "size": 18, "color": "black"},
            ), row=r, col=c)
    fig.update_layout(
        title="alloc_decode on pools around the exact fit: outcome per batch and free-pool size",
        legend_title_text="outcome", height=max(400, 380 * len(page_sizes)),
    )
    fig.update_xaxes(title_text="batch (o: row opens a page)", row=len(page_sizes))
    fig.update_yaxes(title_text="free pages", col=1)
    return fig


def request_trace_plot(trace_frame: pd.DataFrame) -> go.Figure:
    """Tokens one request reads per committed length, against the buffer's capacity and the
    request table's width; failing steps marked by outcome."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=trace_frame["seq_len"], y=trace_frame["reads"], mode="lines", name="tokens read by the step"))
    fig.add_trace(go.Scatter(
        x=trace_frame["seq_len"], y=trace_frame["buffer_capacity_tokens"], mode="lines", name="buffer capacity (tokens)",
        line={"dash": "dash"},
    ))
    fig.add_trace(go.Scatter(
        x=trace_frame["seq_len"], y=trace_frame["request_table_width"], mode="lines", name="request table width W",
        line={"dash": "dot"},
    ))
    failing = trace_frame[trace_frame["outcome"] != "ok"]
    for outcome, group in failing.groupby("outcome", sort=True):
        fig.add_trace(go.Scatter(
            x=group["seq_len"], y=group["reads"], mode="markers", name=f"step fails: {outcome}", text=group["error"],
            marker={"color": OUTCOME_COLOURS.get(outcome), "size": 9, "symbol": "x"},
            hovertemplate="s=%{x}, reads %{y}<br>%{text}<extra></extra>",
        ))
    fig.update_layout(
        title="One request near its table bound: reads per step against the buffer",
        xaxis_title="committed length s (tokens)", yaxis_title="tokens", legend_title_text="series",
    )
    return fig
