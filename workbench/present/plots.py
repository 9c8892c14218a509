"""DataFrame in, plotly Figure out. Plots group and label; they compute nothing.

Each function takes a frame made by ``workbench.analysis.sweep``, ``workbench.analysis.memory`` or
``workbench.present.verdicts`` and returns a figure for a design review: a title, every axis titled
with its quantity and unit, discrete colours for discrete outcomes in one fixed order, the same
category order in every panel, and sizes that keep labels apart (``tests/test_report_browser.py``
measures the drawn text of every figure of the report and fails on any overlap).
"""

from __future__ import annotations

from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import plotly.graph_objects as go  # type: ignore[import-untyped]
from plotly.subplots import make_subplots  # type: ignore[import-untyped]

from workbench.present.verdicts import VERDICT_COLOURS, VERDICTS, with_verdicts
from workbench.present.words import COLOURS, NOT_APPLICABLE, legend_name, marker_word

OUTCOMES = ("ok", "out-of-memory", "shape-error", "index-error", "silent-overread", "silent-overwrite", "host-assert",
            "host-error", "invalid")
# One colour per word (``words.COLOURS``: ok and out-of-memory are no failure, light green; a raised
# error red; a silent over-read or overwrite orange); the outcomes a word covers differ by marker.
OUTCOME_COLOURS = {outcome: COLOURS[marker_word(outcome)] for outcome in OUTCOMES}
OUTCOME_SYMBOLS = {"ok": "circle", "out-of-memory": "square", "shape-error": "x", "index-error": "diamond",
                   "silent-overread": "triangle-up", "silent-overwrite": "triangle-down", "host-assert": "cross",
                   "host-error": "star", "invalid": "circle-open"}


def outcome_legend(outcome: str) -> str:
    """A drawn outcome's legend entry: its word, then the outcome (``words.legend_name``)."""
    return legend_name(marker_word(outcome), outcome)


FONT = {"family": "DejaVu Sans, Arial, sans-serif", "size": 12}
# Every figure is drawn for this width (the report page, the PNGs and the notebooks): JupyterLab 4's
# output area at a 1400 px window with its file browser open, so nothing is cut off there.
MAX_NOTEBOOK_WIDTH = 940
WIDTH = MAX_NOTEBOOK_WIDTH


def _sorted_values(frame: pd.DataFrame, column: str) -> list[Any]:
    return sorted(frame[column].unique().tolist())


def _config_label(row: pd.Series, parts: list[str]) -> str:
    names = {"backend": "", "rule": "", "draft_tokens": "D=", "width_gen": ""}
    return " · ".join(f"{names.get(p, p + '=')}{row[p]}" for p in parts)


def _base_layout(fig: go.Figure, title: str, height: int, width: int = WIDTH, **extra: Any) -> go.Figure:
    fig.update_layout(title={"text": title, "x": 0.01, "xanchor": "left"}, height=height, width=width, font=FONT,
                      plot_bgcolor="white", **extra)
    return fig


# ---- failure maps ------------------------------------------------------------------------------


def _verdict_colorscale() -> list[list[Any]]:
    """Piecewise-constant: code i (0 .. n-1) draws in VERDICT_COLOURS[VERDICTS[i]]."""
    n = len(VERDICTS)
    scale: list[list[Any]] = []
    for i, verdict in enumerate(VERDICTS):
        scale += [[i / n, VERDICT_COLOURS[verdict]], [(i + 1) / n, VERDICT_COLOURS[verdict]]]
    return scale


def _map_cell(panel: pd.DataFrame, config: str, ctx: int, code: dict[str, int]) -> tuple[int, str, str]:
    """One cell of a failure map: (verdict code, the number written in it, the hover text)."""
    if (config, ctx) not in panel.index:
        return code[NOT_APPLICABLE], "n/a", "not a valid configuration"
    row = panel.loc[(config, ctx)]
    row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
    if pd.isna(row["first_failing_seq_len"]):
        return code[row["verdict"]], "", f"safe up to s = {int(row['max_seq_len']):,}"
    first = int(row["first_failing_seq_len"])
    return code[row["verdict"]], f"{first:,}", (
        f"{row['verdict']}: first failing s = {first:,} (ctx {int(row['failing_offset']):+d})<br>{row['error']}")


def failure_map(frame: pd.DataFrame) -> go.Figure:
    """Per configuration (rows: rule x draft tokens, columns: context length), the verdict as a
    colour and the first failing committed length as the cell's number; one panel per mode (rows)
    and page size (columns), every panel with the same rows in the same order.

    Green cells never fail up to ``ctx - 1 + overshoot``; grey ones are not a valid configuration
    (a speculative mode without draft tokens). Backend and width generation join the row label
    when the frame holds more than one of them.
    """
    frame = with_verdicts(frame)
    modes = list(dict.fromkeys(frame["mode"]))
    page_sizes = _sorted_values(frame, "page_size")
    parts = [p for p in ("backend", "width_gen") if frame[p].nunique() > 1] + ["rule", "draft_tokens"]
    ordered = frame.sort_values([p for p in parts if p != "rule"] + ["rule"], kind="stable")
    labelled = frame.assign(config=frame.apply(_config_label, axis=1, parts=parts))
    rows_order = list(dict.fromkeys(ordered.apply(_config_label, axis=1, parts=parts)))
    contexts = _sorted_values(frame, "context_len")
    x = [f"{c:,}" for c in contexts]
    code = {v: i for i, v in enumerate(VERDICTS)}
    height = 150 + len(modes) * (len(rows_order) * 22 + 60)
    fig = make_subplots(rows=len(modes), cols=len(page_sizes), shared_xaxes=True, shared_yaxes=True,
                        subplot_titles=[f"{m} · page size {p}" for m in modes for p in page_sizes],
                        horizontal_spacing=0.02, vertical_spacing=min(0.3, 55 / height))
    for r, mode in enumerate(modes, start=1):
        for c, ps in enumerate(page_sizes, start=1):
            panel = labelled[(labelled["mode"] == mode) & (labelled["page_size"] == ps)].set_index(["config", "context_len"])
            cells = [[_map_cell(panel, config, ctx, code) for ctx in contexts] for config in rows_order]
            z = [[cell[0] for cell in row] for row in cells]
            text = [[cell[1] for cell in row] for row in cells]
            hover = [[cell[2] for cell in row] for row in cells]
            fig.add_trace(go.Heatmap(
                z=z, x=x, y=rows_order, text=text, customdata=hover, texttemplate="%{text}", textfont={"size": 11},
                zmin=-0.5, zmax=len(VERDICTS) - 0.5, colorscale=_verdict_colorscale(), showscale=(r, c) == (1, 1),
                xgap=2, ygap=2, name=f"{mode}, ps={ps}",
                colorbar={"title": {"text": "verdict"}, "tickvals": list(range(len(VERDICTS))), "ticktext": list(VERDICTS),
                          "len": min(1.0, 300 / (len(rows_order) * 22 * len(modes) + 60)), "y": 1, "yanchor": "top"},
                hovertemplate="ctx %{x}<br>%{y}<br>%{customdata}<extra></extra>",
            ), row=r, col=c)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    fig.update_xaxes(title_text="context length ctx (tokens)", row=len(modes))
    names = {"backend": "backend", "width_gen": "width gen", "rule": "rule", "draft_tokens": "draft tokens D"}
    fig.update_yaxes(title_text=" · ".join(names[p] for p in parts), col=1)
    return _base_layout(fig, "First failing committed length s (cell number) and verdict per configuration", height)


# ---- memory ------------------------------------------------------------------------------------


def _coinciding(cost: pd.DataFrame, component: str) -> list[str]:
    """Rules of ``component`` whose extra bytes are the same as another rule's for every preset."""
    part = cost[cost["component"] == component].pivot_table(index="preset", columns="rule", values="extra_bytes")
    rules = list(part.columns)
    return [f"{a} and {b}" for i, a in enumerate(rules) for b in rules[i + 1:] if (part[a] == part[b]).all()]


def fix_cost_plot(cost: pd.DataFrame) -> go.Figure:
    """What each fix costs over the baseline rule (``verdicts.fix_cost``): extra graph-buffer bytes
    per preset (left) and the same as parts per billion of the preset's KV budget (right). Bars
    start at zero; rules that take the same bytes are said so in the panel title, and a rule
    exactly as wide as the baseline is written on its bar."""
    rules = list(dict.fromkeys(cost["rule"]))
    presets = list(dict.fromkeys(cost["preset"]))
    components = list(dict.fromkeys(cost["component"]))
    baseline = cost["baseline"].iloc[0]
    titles = [f"{comp}: {what}" for comp in components for what in ("extra bytes", "extra share of the KV budget")]
    notes = [f"{comp}: {pair} take the same bytes for every preset" for comp in components for pair in _coinciding(cost, comp)]
    fig = make_subplots(rows=len(components), cols=2, horizontal_spacing=0.12, vertical_spacing=0.25, subplot_titles=titles)
    palette = ["#1565c0", "#6d4c41", "#00838f", "#ad1457"]
    for r, component in enumerate(components, start=1):
        for c, column in enumerate(("extra_bytes", "extra_ppb"), start=1):
            for i, rule in enumerate(rules):
                part = cost[(cost["component"] == component) & (cost["rule"] == rule)].set_index("preset").reindex(presets)
                values = part[column].fillna(0)
                fig.add_trace(go.Bar(
                    x=presets, y=values, name=rule, legendgroup=rule, showlegend=(r, c) == (1, 1),
                    text=["= " + baseline if v == 0 else "" for v in values], textposition="outside",
                    marker={"color": palette[i % len(palette)]},
                    hovertemplate=f"{rule}<br>%{{x}}: %{{y:,}}<extra></extra>",
                ), row=r, col=c)
            fig.update_yaxes(rangemode="tozero", row=r, col=c, tickformat=",d" if column == "extra_bytes" else "~g", title_text=(
                f"extra bytes over {baseline} (bytes)" if column == "extra_bytes" else "extra share of KV budget (parts per billion)"))
            fig.update_xaxes(title_text="model preset", row=r, col=c)
    fig.update_layout(barmode="group", legend={"title": {"text": "rule"}, "orientation": "h", "y": -0.2 / len(components),
                                               "yanchor": "top", "x": 0})
    fig.update_yaxes(gridcolor="#eeeeee")
    title = f"What each rule costs beyond the {baseline} rule (max_bs rows of int32)"
    if notes:
        title += "<br><sup>" + "; ".join(notes) + "</sup>"
    return _base_layout(fig, title, 200 + 380 * len(components), margin={"b": 130, "t": 110})


# ---- the allocator -----------------------------------------------------------------------------


def _batch_label(batch: str, pattern: str) -> str:
    """A batch as its y tick: its name and its rows (``o`` opens a page, ``.`` does not)."""
    return f"{batch}  {pattern}"


def exact_fit_map(alloc_frame: pd.DataFrame, mark: pd.DataFrame | None = None) -> go.Figure:
    """Each batch (y: its name and rows, ``o`` for a row whose new token opens a page, ``.`` for one
    that does not) against the free pages it meets (x), coloured by outcome; a black bar marks the
    pages the batch opens (the exact fit). Panels per gather (columns) and page size (rows), every
    panel with the batches in the same order. ``mark``: rows of the frame to circle (the explorer's state)."""
    gathers = list(dict.fromkeys(alloc_frame["gather"]))
    page_sizes = _sorted_values(alloc_frame, "page_size")
    labelled = alloc_frame.assign(label=[_batch_label(b, p) for b, p in zip(alloc_frame["batch"], alloc_frame["pattern"])])
    labels = list(dict.fromkeys(labelled["label"]))
    panel_px = 18 * len(labels) + 30
    height = 190 + panel_px * len(page_sizes)
    # Gathers name the columns (once, on top); page sizes name the rows (each row's y title).
    fig = make_subplots(rows=len(page_sizes), cols=len(gathers), shared_yaxes=True, shared_xaxes=True,
                        subplot_titles=[g if r == 0 else "" for r in range(len(page_sizes)) for g in gathers],
                        horizontal_spacing=0.02, vertical_spacing=min(0.2, 40 / height) if len(page_sizes) > 1 else 0.0)
    shown: set[str] = set()
    for r, ps in enumerate(page_sizes, start=1):
        for c, gather in enumerate(gathers, start=1):
            panel = labelled[(labelled["gather"] == gather) & (labelled["page_size"] == ps)]
            for outcome in OUTCOMES:  # a trace per outcome in every panel, empty where none: constant traces
                group = panel[panel["outcome"] == outcome]
                fig.add_trace(go.Scatter(  # plain lists: plotly validates a pandas column several times slower
                    x=group["free_pages"].tolist(), y=group["label"].tolist(), mode="markers", name=outcome_legend(outcome),
                    legendgroup=outcome, showlegend=outcome not in shown and not group.empty,
                    marker={"color": OUTCOME_COLOURS[outcome], "size": 9, "symbol": OUTCOME_SYMBOLS[outcome],
                            "line": {"color": "#333", "width": 0.5}},
                    customdata=group[["pages_needed"]].values.tolist(), text=group["error"].tolist(),
                    hovertemplate="%{y}<br>free %{x}, needed %{customdata[0]}<br>%{text}<extra></extra>",
                ), row=r, col=c)
                if not group.empty:
                    shown.add(outcome)
            needed = panel.drop_duplicates("label")
            fig.add_trace(go.Scatter(
                x=needed["pages_needed"].tolist(), y=needed["label"].tolist(), mode="markers",
                name="pages the batch opens (exact fit)", legendgroup="needed", showlegend=(r, c) == (1, 1),
                hoverinfo="skip", marker={"symbol": "line-ns-open", "size": 16, "color": "black", "line": {"width": 2}},
            ), row=r, col=c)
            if mark is not None:  # in every panel, empty but in the explored one (``mark_states`` moves it)
                fig.add_trace(go.Scatter(
                    x=[], y=[], mode="markers", name="explored state", legendgroup="mark", showlegend=False,
                    meta={"gather": gather, "page_size": ps},
                    marker={"symbol": "circle-open", "size": 18, "color": "black", "line": {"width": 2}},
                ), row=r, col=c)
    if mark is not None:
        mark_states(fig, mark)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels, autorange="reversed",
                     tickfont={"family": "DejaVu Sans Mono, monospace", "size": 11}, gridcolor="#eeeeee")
    for r, ps in enumerate(page_sizes, start=1):
        fig.update_yaxes(title_text=f"batch (page size {ps})", row=r, col=1)
    most = int(max(alloc_frame["free_pages"].max(), alloc_frame["pages_needed"].max()))
    fig.update_xaxes(range=[-0.7, most + 0.7], dtick=2, gridcolor="#eeeeee")  # whole markers at 0 and at the end
    fig.update_xaxes(title_text="free pages (count)", row=len(page_sizes))
    return _base_layout(fig, "alloc_decode on pools around the exact fit: outcome per batch and free-pool size", height,
                        width=MAX_NOTEBOOK_WIDTH,
                        # under the axes (container coordinates): clear of a title of two lines
                        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 8 / height, "yanchor": "bottom",
                                "yref": "container", "title": {"text": "outcome (o: the row's new token opens a page)"}},
                        margin={"t": 100, "l": 20, "r": 20, "b": 110})


def mark_states(fig: go.Figure, mark: pd.DataFrame) -> go.Figure:
    """Circle ``mark``'s rows (gather, page_size, pattern, free_pages) on an ``exact_fit_map`` made
    with a ``mark``: its "explored state" traces move, nothing else is redrawn."""
    for trace in fig.data:
        if trace.name == "explored state" and isinstance(trace.meta, dict):
            here = mark[(mark["gather"] == trace.meta["gather"]) & (mark["page_size"] == trace.meta["page_size"])]
            trace.update(x=list(here["free_pages"]), y=[_batch_label(b, p) for b, p in zip(here["batch"], here["pattern"])],
                         showlegend=not here.empty)
    return fig


# ---- one request ---------------------------------------------------------------------------------


def request_trace_plot(trace_frame: pd.DataFrame, mark_seq_len: int | None = None) -> go.Figure:
    """Tokens one request reads per committed length, against the buffer's capacity and the
    request table's width; failing steps marked by outcome; ``mark_seq_len`` draws a line there."""
    fig = go.Figure()
    x = trace_frame["seq_len"]
    fig.add_trace(go.Scatter(x=x, y=trace_frame["reads"], mode="lines", name="tokens read by the step"))
    # A rule as wide as W (DSA's req-to-token) draws both lines on one another: the names say so.
    same = bool((trace_frame["buffer_capacity_tokens"] == trace_frame["request_table_width"]).all())
    fig.add_trace(go.Scatter(x=x, y=trace_frame["buffer_capacity_tokens"], mode="lines", line={"dash": "dash"},
                             name="buffer capacity (= W, under the dotted line)" if same else "buffer capacity"))
    fig.add_trace(go.Scatter(x=x, y=trace_frame["request_table_width"], mode="lines", line={"dash": "dot"},
                             name="request table width W (= buffer capacity)" if same else "request table width W"))
    for outcome in OUTCOMES[1:]:  # every failing outcome has its trace (empty: no legend entry), so the
        group = trace_frame[trace_frame["outcome"] == outcome]  # explorer's figure keeps its traces
        fig.add_trace(go.Scatter(
            x=group["seq_len"], y=group["reads"], mode="markers", name=f"step {outcome_legend(outcome)}", text=group["error"],
            showlegend=not group.empty,
            marker={"color": OUTCOME_COLOURS[outcome], "size": 9, "symbol": OUTCOME_SYMBOLS[outcome]},
            hovertemplate="s=%{x}, reads %{y}<br>%{text}<extra></extra>",
        ))
    if mark_seq_len is not None:
        fig.add_vline(x=mark_seq_len, line={"color": "#555555", "width": 1})
    fig.update_xaxes(title_text="committed length s (tokens)", tickformat=",d", gridcolor="#eeeeee")
    fig.update_yaxes(title_text="tokens read or held (tokens)", tickformat=",d", gridcolor="#eeeeee")
    return _base_layout(fig, "One request near its table bound: tokens read per step against the buffer", 480,
                        legend={"orientation": "h", "y": -0.25, "yanchor": "top", "x": 0}, margin={"b": 120})
