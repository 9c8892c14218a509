"""One vocabulary, one palette: every figure the report draws names its verdicts in ``words.WORDS``
and draws each in ``words.COLOURS``.

Each figure is rendered from a small frame built here (plotly Figure objects, no browser): the
atlas and history from hand-made rows (one per status, loud and silent), the failure map, the
allocator's map and a request's trace from small sweeps. A legend entry that names a verdict must
start with a word (``fails loudly: index-error``) and be drawn in that word's colour; a colour bar
must name words (a long one in two lines) and draw each band in its word's colour. Entries that are
no verdict (a rule, a line of a plot) are listed per figure, so a new entry must be one or the other.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import pytest

from workbench.analysis.cases import TableCase
from workbench.analysis.sweep import SweepGrid, allocator_exact_fit_sweep, request_trace, run_sweep
from workbench.model.geometry import Mode, ServingGeometry
from workbench.present.atlas_figure import atlas_figure
from workbench.present.history_figure import history_figure
from workbench.present.plots import exact_fit_map, failure_map, request_trace_plot
from workbench.present.words import COLOURS, WORDS, word_of_legend

# Legend entries that name no verdict, per figure.
NOT_VERDICTS = {
    "exact_fit_map": {"pages the batch opens (exact fit)", "explored state"},
    "request_trace_plot": {"tokens read by the step", "buffer capacity", "request table width W",
                           "buffer capacity (= W, under the dotted line)", "request table width W (= buffer capacity)"},
}


def atlas_rows() -> pd.DataFrame:
    """Two releases of one backend, a row per status (loud, silent, past reach, safe, refused)."""
    base = {"backend": "sglang-fa3-page-table", "rule": "context", "preset": "QwQ-32B", "recipe": "ngram-16",
            "context_len": 32768, "page_size": 64, "draft_tokens": 16}
    rows = []
    for engine, statuses in (("sglang==0.5.10", ("reachable", "reachable", "unreachable", "safe")),
                             ("sglang==0.5.23", ("reachable", "refused", "unreachable", "safe"))):
        for mode, status, outcome in zip(("decode", "target-verify", "draft-decode", "draft-extend"), statuses,
                                         ("shape-error", "silent-overread", "shape-error", "ok")):
            rows.append({**base, "engine": engine, "mode": mode, "status": status, "outcome": outcome,
                         "first_failing_seq_len": 32753 if status in ("reachable", "unreachable") else None,
                         "margin": -17 if status == "reachable" else 40 if status == "unreachable" else None,
                         "startup_refusal": "refused: NGRAM needs page size 1" if status == "refused" else None,
                         "settings_refused": 3 if status == "refused" else None})
    return pd.DataFrame(rows)


def history_rows() -> pd.DataFrame:
    """One reference deployment per line over four releases, one line per status the history knows."""
    lines = {("sglang-ascend-block-tables", "target-verify"): ("reachable", "shape-error"),
             ("sglang-fa3-page-table", "target-verify"): ("reachable", "silent-overread"),
             ("sglang-dsa-page-table", "target-verify"): ("unreachable", "shape-error"),
             ("allocator", "decode"): ("safe", "ok"),
             ("sglang-xpu-page-table", "decode"): ("refused", None),
             ("sglang-trtllm-mla-page-table", "decode"): ("not modelled", None),
             ("sglang-aiter-page-table", "decode"): ("absent", None),
             ("sglang-flashmla-page-table", "decode"): ("not learned", None)}
    rows = []
    for release in ("sglang==0.5.1", "sglang==0.5.1.post3", "sglang==0.5.2", "sglang==0.5.3"):
        for (backend, mode), (status, outcome) in lines.items():
            rows.append({"release": release, "backend": backend, "mode": mode, "reference": f"{backend} reference",
                         "status": status, "outcome": outcome,
                         "first_failing": 32753 if status in ("reachable", "unreachable") else None,
                         "startup_refusal": "refused: not on XPU" if status == "refused" else None})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def figures() -> dict[str, go.Figure]:
    sweep = run_sweep(SweepGrid(context_lens=(40, 67), page_sizes=(1, 16), draft_tokens=(0, 3)), cache_dir=None,
                      progress=False)
    trace = request_trace(TableCase(component="npu-block-table", rule="context", mode=Mode.TARGET_VERIFY,
                                    geometry=ServingGeometry(context_len=256, page_size=64, draft_tokens=16)), steps=30)
    return {"atlas_figure": atlas_figure(atlas_rows()), "history_figure": history_figure(history_rows()),
            "failure_map": failure_map(sweep), "exact_fit_map": exact_fit_map(allocator_exact_fit_sweep((4,), max_batch=3)),
            "request_trace_plot": request_trace_plot(trace)}


def _legend(fig: go.Figure) -> list[tuple[str, Any]]:
    """(name, colour) of each legend entry the figure shows."""
    return [(trace.name, trace.marker.color) for trace in fig.data
            if trace.type != "heatmap" and trace.showlegend is not False and trace.name]


def _colour_bands(trace: Any) -> list[tuple[str, str]]:
    """(tick word, colour of the scale at that tick) of a discrete heatmap's colour bar."""
    low, high = trace.zmin, trace.zmax
    out = []
    for tick, text in zip(trace.colorbar.tickvals, trace.colorbar.ticktext):
        at = (tick - low) / (high - low)
        colour = next(c for (start, c), (end, _) in zip(trace.colorscale[::2], trace.colorscale[1::2]) if start <= at <= end)
        out.append((text.replace("<br>", " "), colour))
    return out


@pytest.mark.parametrize("name", ["atlas_figure", "history_figure", "failure_map", "exact_fit_map", "request_trace_plot"])
def test_every_legend_entry_is_a_word_in_its_colour(figures: dict[str, go.Figure], name: str) -> None:
    fig = figures[name]
    checked = 0
    for entry, colour in _legend(fig):
        if entry in NOT_VERDICTS.get(name, set()):
            continue
        word = word_of_legend(entry.removeprefix("step "))  # a request trace's markers: "step fails loudly: ..."
        assert colour == COLOURS[word], (name, entry, colour)
        checked += 1
    for trace in fig.data:
        if trace.type == "heatmap" and trace.showscale is not False and trace.colorbar.ticktext:
            for word, colour in _colour_bands(trace):
                assert word in WORDS, (name, word)
                assert colour == COLOURS[word], (name, word, colour)
                checked += 1
    assert checked > 0, f"{name} draws no verdict to check"


def test_the_history_shows_every_word_it_has_once_in_the_words_order(figures: dict[str, go.Figure]) -> None:
    shown = [name for name, _ in _legend(figures["history_figure"])]
    # the frame holds a loud and a silent reachable line, past reach, safe, refused and three with nothing run
    assert shown == ["safe", "fails past reach", "fails loudly", "fails silently", "refused at start-up", "n/a"]


def test_the_history_names_backends_by_their_registry_names(figures: dict[str, go.Figure]) -> None:
    ticks = list(figures["history_figure"].layout.yaxis.ticktext)
    assert ticks[0] == "sglang-ascend-block-tables · target-verify"
    assert all(tick.split(" · ")[0] in set(history_rows().backend) for tick in ticks)


def test_a_past_reach_cell_reads_past_reach_not_the_error_a_run_would_meet(figures: dict[str, go.Figure]) -> None:
    heat = figures["atlas_figure"].data[0]
    column = list(heat.x).index("draft-decode")  # unreachable in both releases of ``atlas_rows``
    for row in heat.text:
        assert row[column].split("<br>")[0] == "fails past reach" and "shape-error" not in row[column]
    loud = heat.text[0][list(heat.x).index("decode")]
    assert loud.split("<br>")[:2] == ["fails loudly", "s 32,753"]


def test_the_colour_bar_breaks_long_words_so_neighbours_never_run_together(figures: dict[str, go.Figure]) -> None:
    ticks = list(figures["atlas_figure"].data[0].colorbar.ticktext)
    assert all(len(line) <= len("refused at") for tick in ticks for line in tick.split("<br>")), ticks
